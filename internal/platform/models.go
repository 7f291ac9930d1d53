package platform

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/scripted"
)

// ModelsConfig is the models.yaml file: providers, aliases with prices, and
// exchange rates.
type ModelsConfig struct {
	Providers map[string]ProviderConfig `yaml:"providers"`
	Aliases   []AliasYAML               `yaml:"aliases"`
	Rates     map[string]float64        `yaml:"rates"` // "USD_INR": 88.0
}

// ProviderConfig configures one provider.
type ProviderConfig struct {
	Type   string `yaml:"type"` // scripted
	Script string `yaml:"script"`
	Repeat bool   `yaml:"repeat"`
}

// AliasYAML is one alias entry.
type AliasYAML struct {
	Name      string       `yaml:"name"`
	Provider  string       `yaml:"provider"`
	ModelID   string       `yaml:"model_id"`
	Price     *model.Price `yaml:"price"`
	MaxTokens int          `yaml:"max_tokens"`
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

// Build turns the config into a gateway and rates. readFile resolves paths
// (relative to the config file) such as a scripted provider's script.
func (c *ModelsConfig) Build(filename string, readFile func(string) ([]byte, error), scriptOverride *scripted.Script) (*model.Gateway, *model.Rates, error) {
	providers := map[string]model.Provider{}
	names := make([]string, 0, len(c.Providers))
	for n := range c.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		pc := c.Providers[name]
		switch pc.Type {
		case "scripted":
			s := scriptOverride
			if s == nil {
				if pc.Script == "" {
					return nil, nil, fmt.Errorf("%s: provider %q: scripted provider needs a script (or pass --script)", filename, name)
				}
				p := pc.Script
				if !filepath.IsAbs(p) {
					p = filepath.Join(filepath.Dir(filename), p)
				}
				data, err := readFile(p)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: provider %q: %w", filename, name, err)
				}
				s, err = scripted.Parse(p, data)
				if err != nil {
					return nil, nil, err
				}
			}
			providers[name] = scripted.New(s, scripted.Options{Repeat: pc.Repeat})
		default:
			return nil, nil, fmt.Errorf("%s: provider %q: unknown type %q (known: scripted)", filename, name, pc.Type)
		}
	}
	var aliases []model.AliasConfig
	for _, a := range c.Aliases {
		aliases = append(aliases, model.AliasConfig{Name: a.Name, Provider: a.Provider, ModelID: a.ModelID, Price: a.Price, MaxTokens: a.MaxTokens})
	}
	gw, err := model.NewGateway(model.GatewayOptions{Providers: providers, Aliases: aliases})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filename, err)
	}
	var rates []model.Rate
	for pair, v := range c.Rates {
		from, to, ok := strings.Cut(pair, "_")
		if !ok || v <= 0 || v > 1e9 {
			return nil, nil, fmt.Errorf("%s: rates: %q: want FROM_TO: positive number", filename, pair)
		}
		rates = append(rates, model.Rate{From: from, To: to, Micros: int64(math.Round(v * 1e6))})
	}
	sort.Slice(rates, func(i, j int) bool { return rates[i].From+rates[i].To < rates[j].From+rates[j].To })
	r, err := model.NewRates(rates...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filename, err)
	}
	return gw, r, nil
}
