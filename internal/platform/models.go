package platform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/anthropic"
	"github.com/agentplane/agentplane/model/openai"
	"github.com/agentplane/agentplane/model/scripted"
)

// ModelsConfig is the models.yaml file: providers, aliases with prices,
// exchange rates and the gateway's retry policy.
//
//	providers:
//	  anthropic: {type: anthropic, api_key_env: ANTHROPIC_API_KEY}
//	  local:     {type: openai, base_url: "http://localhost:8000/v1"}
//	  scripted:  {type: scripted, script: turns.yaml}
//	aliases:
//	  - {name: reasoning-standard, provider: anthropic, model_id: claude-sonnet-5,
//	     fallback: reasoning-local, price: {currency: USD, input_per_mtok: 2000000, ...}}
//	  - {name: reasoning-local, provider: local, model_id: qwen3-32b}
//	rates: {USD_INR: 88.0}
//	gateway: {attempt_timeout: 120s, max_attempts: 3, base_delay: 1s, max_delay: 30s, max_retry_after: 60s}
type ModelsConfig struct {
	Providers map[string]ProviderConfig `yaml:"providers"`
	Aliases   []AliasYAML               `yaml:"aliases"`
	Rates     map[string]float64        `yaml:"rates"` // "USD_INR": 88.0
	Gateway   GatewayYAML               `yaml:"gateway"`
}

// Provider types.
const (
	ProviderScripted  = "scripted"
	ProviderAnthropic = "anthropic"
	ProviderOpenAI    = "openai"
)

// ProviderConfig configures one provider. Which fields apply depends on
// Type; a field set for a type that does not use it is an error.
type ProviderConfig struct {
	// Type is scripted, anthropic or openai (also for OpenAI-compatible
	// servers such as vLLM, Ollama and llama.cpp).
	Type string `yaml:"type"`

	// Script and Repeat configure a scripted provider.
	Script string `yaml:"script"`
	Repeat bool   `yaml:"repeat"`

	// BaseURL is the API endpoint of an anthropic or openai provider
	// (default: the vendor's own API; for an OpenAI-compatible server, its
	// URL including /v1).
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the API key. It
	// defaults to ANTHROPIC_API_KEY for anthropic, and to OPENAI_API_KEY for
	// openai without a base_url; "none" sends no key (a local server). A
	// named variable that is unset makes every call fail, without sending
	// anything, with an error naming the variable.
	APIKeyEnv string `yaml:"api_key_env"`

	// PromptCache (anthropic; default true) places cache breakpoints, and
	// CacheTTL ("5m" or "1h") sets their lifetime.
	PromptCache *bool  `yaml:"prompt_cache"`
	CacheTTL    string `yaml:"cache_ttl"`

	// LegacyMaxTokens (openai) sends max_tokens instead of
	// max_completion_tokens, for older compatible servers.
	LegacyMaxTokens bool `yaml:"legacy_max_tokens"`
}

// AliasYAML is one alias entry.
type AliasYAML struct {
	Name      string       `yaml:"name"`
	Provider  string       `yaml:"provider"`
	ModelID   string       `yaml:"model_id"`
	Price     *model.Price `yaml:"price"`
	MaxTokens int          `yaml:"max_tokens"`
	// Fallback names the alias to fail over to when this one's provider
	// stays unavailable.
	Fallback string `yaml:"fallback"`
}

// GatewayYAML is the gateway's policy; zero fields take the gateway's
// defaults (model.DefaultAttemptTimeout, model.RetryPolicy).
type GatewayYAML struct {
	AttemptTimeout time.Duration `yaml:"attempt_timeout"`
	MaxAttempts    int           `yaml:"max_attempts"`
	BaseDelay      time.Duration `yaml:"base_delay"`
	MaxDelay       time.Duration `yaml:"max_delay"`
	MaxRetryAfter  time.Duration `yaml:"max_retry_after"`
}

// ParseModelsConfig parses models.yaml strictly.
func ParseModelsConfig(filename string, data []byte) (*ModelsConfig, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c ModelsConfig
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return &c, nil
}

// BuildOptions are what BuildWith needs from its surroundings.
type BuildOptions struct {
	// ReadFile resolves paths (relative to the config file) such as a
	// scripted provider's script; nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// Script, when set, is served by every scripted provider.
	Script *scripted.Script
	// Getenv reads API keys; nil means os.Getenv.
	Getenv func(string) string
	// HTTPClient is used by the anthropic and openai providers; nil means
	// each builds its own.
	HTTPClient *http.Client
	// Meter, Logger, Now and Sleep are passed to the gateway.
	Meter  model.Meter
	Logger *slog.Logger
	Now    func() time.Time
	Sleep  func(context.Context, time.Duration) error
	// Types are provider types beyond scripted, anthropic and openai, each
	// made by its function and taking no fields: an example's simulated
	// model for evals (a test fixture standing in for a model). The
	// built-in types win over one of the same name.
	Types map[string]func() model.Provider
}

// Build turns the config into a gateway and rates. readFile resolves paths
// (relative to the config file) such as a scripted provider's script.
func (c *ModelsConfig) Build(filename string, readFile func(string) ([]byte, error), scriptOverride *scripted.Script) (*model.Gateway, *model.Rates, error) {
	return c.BuildWith(filename, BuildOptions{ReadFile: readFile, Script: scriptOverride})
}

// BuildWith turns the config into a gateway and rates.
func (c *ModelsConfig) BuildWith(filename string, o BuildOptions) (*model.Gateway, *model.Rates, error) {
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	rates, err := c.rates(filename)
	if err != nil {
		return nil, nil, err
	}
	providers := map[string]model.Provider{}
	names := make([]string, 0, len(c.Providers))
	for n := range c.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p, err := c.Providers[name].build(filename, name, o)
		if err != nil {
			return nil, nil, err
		}
		providers[name] = p
	}
	var aliases []model.AliasConfig
	for _, a := range c.Aliases {
		aliases = append(aliases, model.AliasConfig{Name: a.Name, Provider: a.Provider, ModelID: a.ModelID, Price: a.Price, MaxTokens: a.MaxTokens, Fallback: a.Fallback})
	}
	g := c.Gateway
	if g.AttemptTimeout < 0 || g.MaxAttempts < 0 || g.BaseDelay < 0 || g.MaxDelay < 0 || g.MaxRetryAfter < 0 {
		return nil, nil, fmt.Errorf("%s: gateway: durations and max_attempts must not be negative", filename)
	}
	gw, err := model.NewGateway(model.GatewayOptions{
		Providers:      providers,
		Aliases:        aliases,
		Retry:          model.RetryPolicy{MaxAttempts: g.MaxAttempts, BaseDelay: g.BaseDelay, MaxDelay: g.MaxDelay, MaxRetryAfter: g.MaxRetryAfter},
		AttemptTimeout: g.AttemptTimeout,
		Rates:          rates,
		Meter:          o.Meter,
		Logger:         o.Logger,
		Now:            o.Now,
		Sleep:          o.Sleep,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filename, err)
	}
	return gw, rates, nil
}

func (c *ModelsConfig) rates(filename string) (*model.Rates, error) {
	var rates []model.Rate
	for pair, v := range c.Rates {
		from, to, ok := strings.Cut(pair, "_")
		if !ok || v <= 0 || v > 1e9 {
			return nil, fmt.Errorf("%s: rates: %q: want FROM_TO: positive number", filename, pair)
		}
		rates = append(rates, model.Rate{From: from, To: to, Micros: int64(math.Round(v * 1e6))})
	}
	sort.Slice(rates, func(i, j int) bool { return rates[i].From+rates[i].To < rates[j].From+rates[j].To })
	r, err := model.NewRates(rates...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return r, nil
}

// build makes the provider pc describes, refusing fields its type ignores.
func (pc ProviderConfig) build(filename, name string, o BuildOptions) (model.Provider, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: provider %q: "+format, append([]any{filename, name}, args...)...)
	}
	var stray []string
	if pc.Type != ProviderScripted && (pc.Script != "" || pc.Repeat) {
		stray = append(stray, "script/repeat")
	}
	if pc.Type != ProviderAnthropic && pc.Type != ProviderOpenAI && (pc.BaseURL != "" || pc.APIKeyEnv != "") {
		stray = append(stray, "base_url/api_key_env")
	}
	if pc.Type != ProviderAnthropic && (pc.PromptCache != nil || pc.CacheTTL != "") {
		stray = append(stray, "prompt_cache/cache_ttl")
	}
	if pc.Type != ProviderOpenAI && pc.LegacyMaxTokens {
		stray = append(stray, "legacy_max_tokens")
	}
	if len(stray) > 0 && pc.Type != "" {
		return nil, bad("%s do not apply to type %q", strings.Join(stray, ", "), pc.Type)
	}
	switch pc.Type {
	case ProviderScripted:
		s := o.Script
		if s == nil {
			if pc.Script == "" {
				return nil, bad("scripted provider needs a script (or pass --script)")
			}
			p := pc.Script
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(filename), p)
			}
			data, err := o.ReadFile(p)
			if err != nil {
				return nil, bad("%w", err)
			}
			s, err = scripted.Parse(p, data)
			if err != nil {
				return nil, err
			}
		}
		return scripted.New(s, scripted.Options{Repeat: pc.Repeat}), nil
	case ProviderAnthropic, ProviderOpenAI:
		keyEnv := pc.APIKeyEnv
		if keyEnv == "" {
			switch {
			case pc.Type == ProviderAnthropic:
				keyEnv = "ANTHROPIC_API_KEY"
			case pc.BaseURL == "":
				keyEnv = "OPENAI_API_KEY"
			default:
				keyEnv = "none"
			}
		}
		key := ""
		if keyEnv != "none" {
			if key = o.Getenv(keyEnv); key == "" {
				return missingKey{provider: name, env: keyEnv}, nil
			}
		}
		var p model.Provider
		var err error
		if pc.Type == ProviderAnthropic {
			cache := pc.PromptCache == nil || *pc.PromptCache
			p, err = anthropic.New(anthropic.Options{APIKey: key, BaseURL: pc.BaseURL, HTTPClient: o.HTTPClient, DisableCache: !cache, CacheTTL: pc.CacheTTL, Now: o.Now})
		} else {
			p, err = openai.New(openai.Options{APIKey: key, BaseURL: pc.BaseURL, HTTPClient: o.HTTPClient, LegacyMaxTokens: pc.LegacyMaxTokens, Now: o.Now})
		}
		if err != nil {
			return nil, bad("%w", err)
		}
		return p, nil
	case "":
		return nil, bad("no type (known: %s)", strings.Join(o.knownTypes(), ", "))
	}
	if mk, ok := o.Types[pc.Type]; ok && mk != nil {
		return mk(), nil // its fields were refused above: it takes none
	}
	return nil, bad("unknown type %q (known: %s)", pc.Type, strings.Join(o.knownTypes(), ", "))
}

// knownTypes lists the built-in provider types and those o adds.
func (o BuildOptions) knownTypes() []string {
	out := []string{ProviderAnthropic, ProviderOpenAI, ProviderScripted}
	for t := range o.Types {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// missingKey stands in for a provider whose API key variable is unset: the
// configuration still loads (other aliases keep working, and the scripted
// default needs no key), and every call through it fails at once, without
// a request leaving the machine, saying which variable to set.
type missingKey struct{ provider, env string }

func (m missingKey) Complete(context.Context, *model.Request) (*model.Response, error) {
	return nil, &model.Error{Err: fmt.Errorf("provider %q: no API key: environment variable %s is not set", m.provider, m.env)}
}

// ErrNoModelsFile is returned by LoadModelsConfig when neither an explicit
// file nor DATA/models.yaml exists.
var ErrNoModelsFile = errors.New("no models.yaml")

// LoadModelsConfig reads file, or dataDir/models.yaml when file is empty,
// and returns the parsed config with the path it came from.
func LoadModelsConfig(dataDir, file string) (*ModelsConfig, string, error) {
	name := file
	if name == "" {
		name = filepath.Join(dataDir, "models.yaml")
	}
	data, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) && file == "" {
		return nil, name, fmt.Errorf("%w in %s: write one or pass --models (see examples/carddispute/files/models.yaml)", ErrNoModelsFile, dataDir)
	}
	if err != nil {
		return nil, name, err
	}
	c, err := ParseModelsConfig(name, data)
	return c, name, err
}
