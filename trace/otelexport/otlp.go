package otelexport

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// EndpointHelp says which endpoints NewOTLPExporter takes.
const EndpointHelp = "http://HOST:4318/v1/traces or https://... (OTLP/HTTP), grpc://HOST:4317 or grpcs://HOST:4317 (OTLP/gRPC)"

// NewOTLPExporter returns an OTLP span exporter for endpoint: an http or
// https URL is OTLP/HTTP (protobuf) to that URL, grpc://HOST:PORT is
// OTLP/gRPC in plain text and grpcs://HOST:PORT OTLP/gRPC over TLS. The
// exporter retries a failed request for at most retryFor (0: never), so a
// batch that cannot be delivered is given up and counted rather than held.
func NewOTLPExporter(ctx context.Context, endpoint string, retryFor time.Duration) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("otlp endpoint %q: want %s", endpoint, EndpointHelp)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		retry := otlptracehttp.RetryConfig{Enabled: retryFor > 0, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: retryFor}
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint), otlptracehttp.WithRetry(retry))
	case "grpc", "grpcs":
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("otlp endpoint %q: a gRPC endpoint has no path (want grpc://HOST:PORT)", endpoint)
		}
		retry := otlptracegrpc.RetryConfig{Enabled: retryFor > 0, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: retryFor}
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(u.Host), otlptracegrpc.WithRetry(retry)}
		if strings.EqualFold(u.Scheme, "grpc") {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	return nil, fmt.Errorf("otlp endpoint %q: unknown scheme %q; want %s", endpoint, u.Scheme, EndpointHelp)
}
