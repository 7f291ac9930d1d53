package platform

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/anthropic/anthropictest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestModelsConfigProviders(t *testing.T) {
	primary := anthropictest.NewServer(anthropictest.Options{Reply: func(*anthropictest.Call) anthropictest.Reply {
		return anthropictest.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}
	}})
	defer primary.Close()
	backup := anthropictest.NewServer(anthropictest.Options{})
	defer backup.Close()
	yml := `
providers:
  anthropic: {type: anthropic, base_url: "` + primary.URL + `", cache_ttl: 1h}
  backup:    {type: anthropic, base_url: "` + backup.URL + `", api_key_env: BACKUP_KEY, prompt_cache: false}
  local:     {type: openai, base_url: "http://127.0.0.1:1/v1"}
  hosted:    {type: openai, legacy_max_tokens: true}
aliases:
  - {name: standard, provider: anthropic, model_id: claude-sonnet-5, fallback: standard-backup,
     price: {currency: USD, input_per_mtok: 2000000, output_per_mtok: 10000000, cache_write_per_mtok: 2500000, cache_read_per_mtok: 200000}}
  - {name: standard-backup, provider: backup, model_id: claude-sonnet-5-backup}
  - {name: local, provider: local, model_id: qwen3-32b}
  - {name: hosted, provider: hosted, model_id: gpt-6}
rates: {USD_INR: 88}
gateway: {attempt_timeout: 30s, max_attempts: 2, base_delay: 10ms, max_delay: 20ms, max_retry_after: 5s}
`
	c, err := ParseModelsConfig("models.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway.AttemptTimeout != 30*time.Second || c.Gateway.MaxAttempts != 2 {
		t.Errorf("gateway section %+v", c.Gateway)
	}
	ledger := &model.Ledger{}
	gw, rates, err := c.BuildWith("models.yaml", BuildOptions{
		Getenv: env(map[string]string{"ANTHROPIC_API_KEY": "sk-primary", "BACKUP_KEY": "sk-backup"}),
		Meter:  ledger,
		Sleep:  func(context.Context, time.Duration) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := rates.Convert(model.Money{Micros: 1_000_000, Currency: "USD"}, "INR"); err != nil || m.Micros != 88_000_000 {
		t.Errorf("rates: %v %v", m, err)
	}
	if a, _ := gw.Alias("standard"); a.Fallback != "standard-backup" || a.Price == nil {
		t.Errorf("alias standard %+v", a)
	}
	res, err := gw.Complete(t.Context(), "standard", &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "hi"}}}}}, model.Attribution{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Alias != "standard-backup" || len(primary.Calls()) != 2 || len(backup.Calls()) != 1 {
		t.Errorf("answered by %s; primary saw %d (want max_attempts 2), backup %d", res.Alias, len(primary.Calls()), len(backup.Calls()))
	}
	p, b := primary.Calls()[0], backup.Calls()[0]
	if !strings.Contains(p.Header.Get("Authorization"), "sk-primary") || !strings.Contains(b.Header.Get("Authorization"), "sk-backup") {
		t.Errorf("keys: primary %q backup %q", p.Header.Get("Authorization"), b.Header.Get("Authorization"))
	}
	if !strings.Contains(string(p.Raw), `"ttl":"1h"`) || b.Breakpoints != 0 {
		t.Errorf("cache settings not applied: primary %s; backup breakpoints %d", p.Raw, b.Breakpoints)
	}
	if res.CostKnown {
		t.Error("the unpriced backup's cost reported as known")
	}
}

func TestModelsConfigMissingKeyFailsWithoutSending(t *testing.T) {
	s := anthropictest.NewServer(anthropictest.Options{})
	defer s.Close()
	c, err := ParseModelsConfig("m.yaml", []byte(`
providers: {anthropic: {type: anthropic, base_url: "`+s.URL+`"}}
aliases: [{name: a, provider: anthropic, model_id: claude-sonnet-5}]
`))
	if err != nil {
		t.Fatal(err)
	}
	gw, _, err := c.BuildWith("m.yaml", BuildOptions{Getenv: env(nil)})
	if err != nil {
		t.Fatalf("a missing key must not stop the config loading: %v", err)
	}
	_, err = gw.Complete(t.Context(), "a", &model.Request{}, model.Attribution{})
	if err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY is not set") || model.IsRetryable(err) {
		t.Errorf("error %v: want a non-retryable error naming the variable", err)
	}
	if len(s.Calls()) != 0 {
		t.Error("a request was sent without a key")
	}
}

func TestModelsConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		yml  string
		want string
	}{
		{`providers: {p: {type: anthropic, script: x.yaml}}`, "script/repeat do not apply"},
		{`providers: {p: {type: scripted, script: x.yaml, base_url: "http://x"}}`, "base_url/api_key_env do not apply"},
		{`providers: {p: {type: openai, prompt_cache: false}}`, "prompt_cache/cache_ttl do not apply"},
		{`providers: {p: {type: anthropic, legacy_max_tokens: true}}`, "legacy_max_tokens do not apply"},
		{`providers: {p: {type: gemini}}`, `unknown type "gemini"`},
		{`providers: {p: {}}`, "no type"},
		{`providers: {p: {type: anthropic, base_url: "api.anthropic.com"}}`, "must start with http"},
		{`providers: {p: {type: anthropic, cache_ttl: 2h}}`, "cache TTL"},
		{"providers: {p: {type: openai}}\naliases: [{name: a, provider: p, model_id: m, fallback: b}]", `fallback "b" is not a configured alias`},
		{"gateway: {max_attempts: -1}", "must not be negative"},
	} {
		c, err := ParseModelsConfig("m.yaml", []byte(tc.yml))
		if err == nil {
			_, _, err = c.BuildWith("m.yaml", BuildOptions{Getenv: env(map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"})})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.yml, err, tc.want)
		}
	}
	if _, err := ParseModelsConfig("m.yaml", []byte(`providers: {p: {type: openai, api_key: sk-inline}}`)); err == nil {
		t.Error("an inline api_key field accepted: keys come from the environment")
	}
}

func TestModelsConfigKeyDefaults(t *testing.T) {
	c, err := ParseModelsConfig("m.yaml", []byte(`
providers:
  hosted: {type: openai}
  local:  {type: openai, base_url: "http://127.0.0.1:1/v1"}
  none:   {type: anthropic, api_key_env: none}
aliases:
  - {name: hosted, provider: hosted, model_id: gpt-6}
  - {name: local, provider: local, model_id: llama}
  - {name: none, provider: none, model_id: claude}
`))
	if err != nil {
		t.Fatal(err)
	}
	gw, _, err := c.BuildWith("m.yaml", BuildOptions{Getenv: env(nil), Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	_, err = gw.Complete(t.Context(), "hosted", &model.Request{}, model.Attribution{})
	if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY is not set") {
		t.Errorf("hosted OpenAI without a key: %v", err)
	}
	// A local server needs no key: the call is attempted (and here refused
	// by the closed port, a retryable connection error).
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = gw.Complete(ctx, "local", &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "x"}}}}}, model.Attribution{})
	var me *model.Error
	if !errors.As(err, &me) || strings.Contains(err.Error(), "not set") {
		t.Errorf("local server: %v, want a connection error", err)
	}
}
