// Package platform wires agentplane's parts together on the embedded default
// (SQLite and a blob folder in one data directory): store, tool catalog,
// model gateway, agent registry, broker, loop, the engine (engine.Engine,
// the embedded one) and the use cases over it (runs.Service). The CLI and
// the server both start from here; what they do to runs they do through
// Platform.Runs and Platform.Engine.
package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/secrets"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
	"github.com/agentplane/agentplane/store/postgres"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// Options configure Open.
type Options struct {
	// DataDir holds the database of the embedded store, the blobs unless
	// Blobs names another place, and the platform's files (models.yaml,
	// directory.yaml, secrets).
	DataDir string
	// Store names the run store: "" for the embedded SQLite store in
	// DataDir, or a postgres:// URL (see OpenStore).
	Store string
	// Engine names the engine that executes runs: "" for the embedded
	// engine on the run store, or a Temporal server as
	// temporal://HOST:PORT?namespace=N&task_queue=Q (EngineHelp).
	Engine string
	// Blobs is where blobs are kept, chosen independently of the run
	// store: an s3://BUCKET?endpoint=...&region=...&prefix=...&path_style=true
	// URL (package s3blob), an absolute folder path, or "" for the blob
	// folder of the data directory (OpenBlobs).
	Blobs string
	// Tools are tier-1 functions beyond the platform's own (catalog.New):
	// an example's simulated world, a team's tools. One that is also an
	// io.Closer is closed by Platform.Close.
	Tools []catalog.Registrar
	// ProviderTypes are model provider types beyond the built-in ones
	// (BuildOptions.Types): an example's simulated model for evals.
	ProviderTypes map[string]func() model.Provider
	// ModelsFile is models.yaml; default DataDir/models.yaml.
	ModelsFile string
	// Models, when set, replaces the models file (tests, demo).
	Models *ModelsConfig
	// ModelsReadFile resolves paths named in Models (default os.ReadFile).
	ModelsReadFile func(string) ([]byte, error)
	// Script, when set, is served by every scripted provider.
	Script *scripted.Script
	// Gateway, when set, is used instead of building one from models.yaml.
	Gateway  loop.Models
	Rates    *model.Rates
	LeaseTTL time.Duration
	Logger   *slog.Logger
	Clock    func() time.Time
	// WrapStore lets tests inject failures between the engine and the store.
	WrapStore func(store.Store) store.Store
	// WrapEngine lets tests record or refuse what the use cases (Runs) ask
	// of the engine.
	WrapEngine func(engine.Engine) engine.Engine
	// Directory checks approvers' groups (default: the groups of the
	// users in Principals, or DataDir/directory.yaml when present).
	Directory runs.Directory
	// Principals knows each tenant's users, their scopes, groups and
	// bindings (default: the principals in the store).
	Principals authz.Directory
	// Secrets holds connector secrets (default: sealed files under
	// DataDir/secrets, key from AGENTPLANE_SECRETS_KEY or DataDir/secrets.key).
	Secrets secrets.Store
	// Sandbox turns on tiers 2 and 3.
	Sandbox SandboxOptions
	// MCP configures the MCP host that runs connectors' tools.
	MCP MCPOptions
	// Telemetry configures the live span export and the metrics derived
	// from the events the platform's engine appends.
	Telemetry TelemetryOptions
	// Getenv reads the environment (the blob master key; os.Getenv when
	// nil).
	Getenv func(string) string
}

// Platform is a running agentplane instance.
type Platform struct {
	Store   Store
	Catalog *tool.Catalog
	// Tools are the extensions the catalog was built with (Options.Tools).
	Tools    []catalog.Registrar
	Registry *agent.Registry
	Broker   *broker.Broker
	Loop     *loop.Loop
	// Engine executes runs: everything starts, signals, cancels, verifies
	// and works runs through it.
	Engine engine.Engine
	// Embedded is the embedded engine under Engine (its worker pools and
	// Execute, which tests drive runs with); nil on another engine.
	Embedded *engine.Embedded
	// engineClose closes another engine's connection.
	engineClose func()
	// Runs holds the use cases over runs (start, decide, replay, cancel,
	// message) on Engine.
	Runs   *runs.Service
	Models loop.Models
	Rates  *model.Rates
	// Deltas carries streamed model text to live watchers.
	Deltas *DeltaBus
	// Sandboxes manages tier 2/3 sandboxes (nil when none is configured).
	Sandboxes *sandboxes
	// Directory checks approvers' groups (nil: no approval can be decided).
	Directory runs.Directory
	// Principals is the directory of users the broker authorises against.
	Principals authz.Directory
	// Secrets holds the connector secrets the broker mints credentials from.
	Secrets secrets.Store
	// MCP is the MCP host: the connectors' servers, one session per run.
	MCP        *mcphost.Host
	connectors *connectorRegistry
	oauth      *mcphost.OAuth // users' tokens for oauth connectors (nil: the secrets store keeps no per-user secrets)
	// Telemetry derives metrics and live spans from appended events.
	Telemetry *Telemetry
	log       *slog.Logger
	// providerTypes maps a model alias to its provider's type.
	providerTypes map[string]string
	// manifests parses each stored tool manifest once.
	manifests tool.ManifestCache
}

// Store is everything the platform keeps in its run store: both back ends
// (store/sqlite, store/postgres) implement all of it.
type Store interface {
	store.Store
	store.APIStore
	store.PrincipalStore
	store.TenantStore
	store.ConnectorStore
	store.SessionStore
	store.RateStore
	store.RetentionStore
}

// BlobKeyEnv names the environment variable holding the master key blobs
// are sealed under (32 bytes, base64 or hex). Without it the key is
// DATA/blob.key: created on first use for the embedded store; for a
// PostgreSQL store, read when present, else the database keeps the key
// (every process sharing a store must seal with the same key, and a store
// refuses another). Keep it out of the backups of the blob store
// (docs/design/retention.md).
const BlobKeyEnv = "AGENTPLANE_BLOB_KEY"

// BlobKey returns the platform's blob master key (BlobKeyEnv, else
// dataDir/blob.key, created when missing if create is set; nil when it is
// not and there is none). getenv nil is os.Getenv.
func BlobKey(dataDir string, getenv func(string) string, create bool) ([]byte, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	path := filepath.Join(dataDir, "blob.key")
	if _, err := os.Stat(path); !create && getenv(BlobKeyEnv) == "" && errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	k, err := secrets.LoadKey(getenv, BlobKeyEnv, path)
	if err != nil {
		return nil, fmt.Errorf("blob master key: %w (set %s to 32 bytes as base64 or hex)", err, BlobKeyEnv)
	}
	return k, nil
}

// OpenStore opens the run store named by spec: "" is the embedded SQLite
// store in dataDir, postgres://... (or postgresql://...) a PostgreSQL
// database shared by any number of processes.
//
// Blobs are sealed under blobKey (package store/blobcrypt: BlobKey gives
// the platform's); a PostgreSQL store given none keeps one in the
// database, shared by every process.
func OpenStore(ctx context.Context, spec, dataDir string, blobs store.Blobs, blobKey []byte, log *slog.Logger) (Store, error) {
	switch {
	case spec == "":
		return sqlite.Open(ctx, sqlite.Options{Dir: dataDir, Logger: log, Blobs: blobs, BlobKey: blobKey})
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		return postgres.Open(ctx, postgres.Options{DSN: spec, Logger: log, Blobs: blobs, BlobKey: blobKey, StoredBlobKey: blobKey == nil})
	}
	return nil, fmt.Errorf("store %s: want a postgres:// URL, or nothing for the embedded SQLite store in the data directory", postgres.Redact(spec))
}

// Open starts the platform's components (no background workers).
func Open(ctx context.Context, o Options) (*Platform, error) {
	if o.DataDir == "" {
		return nil, errors.New("platform: no data directory")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	blobs, err := OpenBlobs(ctx, o.Blobs)
	if err != nil {
		return nil, err
	}
	if blobs == nil {
		if blobs, err = blobdir.Open(filepath.Join(o.DataDir, "blobs")); err != nil {
			return nil, err
		}
	}
	blobKey, err := BlobKey(o.DataDir, o.Getenv, o.Store == "")
	if err != nil {
		return nil, err
	}
	st, err := OpenStore(ctx, o.Store, o.DataDir, blobs, blobKey, o.Logger)
	if err != nil {
		return nil, err
	}
	if d, ok := blobs.(*blobdir.Dir); ok {
		if err := adoptLegacyBlobs(ctx, st, d); err != nil {
			st.Close()
			return nil, err
		}
	}
	p := &Platform{Store: st, log: o.Logger, Directory: o.Directory}
	if p.Directory == nil {
		dir, err := LoadDirectoryFile(filepath.Join(o.DataDir, "directory.yaml"))
		switch {
		case err == nil:
			p.Directory = dir
		case !errors.Is(err, os.ErrNotExist):
			st.Close()
			return nil, err
		}
	}
	fail := func(err error) (*Platform, error) {
		p.Close()
		return nil, err
	}
	p.Tools = o.Tools
	p.Catalog, err = catalog.New(o.Tools...)
	if err != nil {
		return fail(err)
	}
	p.Models, p.Rates = o.Gateway, o.Rates
	if p.Models == nil {
		gw, rates, types, err := buildGateway(o)
		if err != nil {
			return fail(err)
		}
		p.providerTypes = types
		if gw != nil {
			p.Models, p.Rates = gw, rates
		} else {
			p.Models = noModels{}
		}
	}
	p.Registry = agent.NewRegistry(st, p.ToolSet)
	if err := p.openSecurity(o); err != nil {
		return fail(err)
	}
	pc := &policyCache{reg: p.Registry}
	var execs map[int]broker.Executor
	p.Sandboxes, execs, err = startSandboxes(ctx, o.Sandbox, o.Logger)
	if err != nil {
		return fail(err)
	}
	if err := p.openMCP(o); err != nil {
		return fail(err)
	}
	p.Broker, err = broker.New(broker.Options{Catalog: p.Catalog, Logger: o.Logger, Clock: o.Clock, Executors: execs, Remote: p.MCP,
		Directory: p.Principals, Policies: pc.get, Credentials: &mcphost.Credentials{Service: &secrets.Broker{Store: p.Secrets, Clock: o.Clock}, OAuth: p.oauth, Registry: p.connectors},
		Rates: p.Store})
	if err != nil {
		return fail(err)
	}
	if err := p.openTelemetry(ctx, o); err != nil {
		return fail(err)
	}
	var es store.Store = p.Telemetry.Tail.Wrap(st)
	if o.WrapStore != nil {
		es = o.WrapStore(es)
	}
	p.Deltas = NewDeltaBus()
	var ender loop.SandboxEnder
	if p.Sandboxes != nil {
		ender = runEnder{p.Sandboxes.Manager}
	}
	var promptLog trace.Stores
	if o.Engine != "" {
		// Temporal keeps activity inputs in its history: prompts travel
		// by hash, rebuilt from the log by the model call activity.
		promptLog = st
	}
	p.Loop, err = loop.New(loop.Options{Log: promptLog, Sandboxes: ender, Resolve: p.resolve, Models: p.Models, Broker: p.Broker, Tools: st, Rates: p.Rates,
		OnDelta: p.Deltas.publish, Approvers: p.Directory,
		Blobs: st, ReplaySpec: func(ctx context.Context, runID string) (*trace.ReplayInfo, error) {
			return engine.PendingReplay(ctx, st, runID)
		}, Logger: o.Logger})
	if err != nil {
		return fail(err)
	}
	if err := p.openEngine(ctx, o, es, blobKey); err != nil {
		return fail(err)
	}
	if o.WrapEngine != nil {
		p.Engine = o.WrapEngine(p.Engine)
	}
	p.Runs, err = runs.New(runs.Options{Engine: p.Engine, Store: st, Registry: p.Registry, Principals: p.Principals,
		Approvers: p.Directory, Settings: p.TenantSettings, CheckModelAlias: p.checkModelAlias})
	if err != nil {
		return fail(err)
	}
	return p, nil
}

// buildGateway builds the gateway of the models config, with each alias's
// provider type.
func buildGateway(o Options) (*model.Gateway, *model.Rates, map[string]string, error) {
	cfg, name := o.Models, "models config"
	read := o.ModelsReadFile
	if read == nil {
		read = os.ReadFile
	}
	if cfg == nil {
		name = o.ModelsFile
		if name == "" {
			name = filepath.Join(o.DataDir, "models.yaml")
		}
		data, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) && o.ModelsFile == "" {
			return nil, nil, nil, nil
		}
		if err != nil {
			return nil, nil, nil, err
		}
		cfg, err = ParseModelsConfig(name, data)
		if err != nil {
			return nil, nil, nil, err
		}
	}
	gw, rates, err := cfg.BuildWith(name, BuildOptions{ReadFile: read, Script: o.Script, Types: o.ProviderTypes})
	if err != nil {
		return nil, nil, nil, err
	}
	types := map[string]string{}
	for _, a := range cfg.Aliases {
		types[a.Name] = cfg.Providers[a.Provider].Type
	}
	return gw, rates, types, nil
}

// noModels answers every call with a clear configuration error.
type noModels struct{}

// NoModelsHint says how to configure a model; serve prints it at start and
// every call without a models file fails with it.
const NoModelsHint = "write models.yaml in the data directory or pass --models FILE (see examples/*/files/models.yaml)"

func (noModels) Complete(_ context.Context, alias string, _ *model.Request, _ model.Attribution) (*model.CallResult, error) {
	return nil, &model.Error{Err: errNoModel(alias)}
}

// errNoModel is the failure of every model call without a models file.
func errNoModel(alias string) error {
	return fmt.Errorf("model alias %q is not configured (no models file and no API key): %s", alias, NoModelsHint)
}

// checkModelAlias fails when the gateway has no alias name (every alias is
// unknown without a models file). A gateway that cannot list its aliases
// (one injected by a test) is taken at its word.
func (p *Platform) checkModelAlias(name string) error {
	var known []string
	switch gw := p.Models.(type) {
	case noModels:
		return errNoModel(name)
	case *model.Gateway:
		if _, ok := gw.Alias(name); ok {
			return nil
		}
		known = gw.Aliases()
	default:
		return nil
	}
	return fmt.Errorf("unknown model alias %q (the models file has %s)", name, strings.Join(known, ", "))
}

// ModelsConfigured reports whether a models file (or a gateway) was given;
// without one every model call fails.
func (p *Platform) ModelsConfigured() bool {
	_, none := p.Models.(noModels)
	return !none
}

// Close stops everything Open started.
func (p *Platform) Close() error {
	var errs []error
	if p.Telemetry != nil {
		errs = append(errs, p.Telemetry.close())
	}
	// The MCP host first: its stdio servers run in sandboxes, and the
	// manager cannot destroy a sandbox whose server still runs (it waited
	// for the host's idle timeout, two minutes, to end the server).
	if p.MCP != nil {
		errs = append(errs, p.MCP.Close())
	}
	if p.Sandboxes != nil {
		p.Sandboxes.Stop()
	}
	for _, r := range p.Tools {
		if c, ok := r.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	if p.engineClose != nil {
		p.engineClose()
	}
	if p.Store != nil {
		errs = append(errs, p.Store.Close())
	}
	return errors.Join(errs...)
}

// ToolSet returns the current tool manifests.
func (p *Platform) ToolSet(ctx context.Context) (*tool.Set, error) {
	recs, err := p.Store.ListTools(ctx)
	if err != nil {
		return nil, err
	}
	ms := make([]*tool.Manifest, 0, len(recs))
	for _, r := range recs {
		m, err := p.manifests.FromJSON(r.Manifest)
		if err != nil {
			return nil, fmt.Errorf("stored tool %s: %w", r.Name, err)
		}
		ms = append(ms, m)
	}
	return tool.NewSet(ms...)
}

// ApplyTools loads manifests from a file or directory, checks that tier-1
// tools exist in the catalog, and stores them. It returns the names stored.
func (p *Platform) ApplyTools(ctx context.Context, path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var ms []*tool.Manifest
	if st.IsDir() {
		ms, err = tool.LoadManifestDir(path)
	} else {
		ms, err = tool.LoadManifestFile(path)
	}
	if err != nil {
		return nil, err
	}
	return p.ApplyManifests(ctx, ms)
}

// ApplyManifests validates and stores parsed manifests.
func (p *Platform) ApplyManifests(ctx context.Context, ms []*tool.Manifest) ([]string, error) {
	set, err := tool.NewSet(ms...)
	if err != nil {
		return nil, err
	}
	if err := set.CheckCatalog(p.Catalog); err != nil {
		return nil, err
	}
	var names []string
	for _, m := range ms {
		if err := p.Store.PutTool(ctx, &store.ToolRecord{Name: m.Name, Manifest: m.CanonicalJSON(), Hash: m.Hash()}); err != nil {
			return nil, err
		}
		names = append(names, m.Name)
	}
	return names, nil
}

// resolve is the loop's Resolver: the agent version plus its granted tools.
func (p *Platform) resolve(ctx context.Context, name string, version int) (*loop.Agent, error) {
	d, set, err := p.Registry.GetWithTools(ctx, name, version)
	if err != nil {
		return nil, err
	}
	granted, err := d.GrantedTools(set)
	if err != nil {
		return nil, err
	}
	a := &loop.Agent{Name: d.Agent, Version: d.Version, Hash: d.Hash(), ModelAlias: d.Model.Alias, Instructions: d.Instructions,
		Budgets: loop.Budgets{MaxSteps: d.Budgets.MaxSteps, MaxInputTokens: d.Budgets.MaxInputTokens,
			MaxCost: model.Money{Micros: d.Budgets.CostMicros, Currency: d.Budgets.Currency}, MaxWallClockMS: d.Budgets.MaxWallClock.Milliseconds()}}
	for _, n := range granted {
		m, _ := set.Get(n)
		a.Tools = append(a.Tools, m)
	}
	a.Search = d.Search()
	var searchable []*tool.Manifest
	for _, n := range d.SearchableTools(set) {
		m, _ := set.Get(n)
		searchable = append(searchable, m)
	}
	// One pass, so each connector is probed once for both lists.
	all := p.offerable(ctx, append(slices.Clip(a.Tools), searchable...))
	a.Tools, a.Searchable = nil, nil
	for _, m := range all {
		if _, ok := slices.BinarySearch(granted, m.Name); ok {
			a.Tools = append(a.Tools, m)
		} else {
			a.Searchable = append(a.Searchable, m)
		}
	}
	a.Temperature = d.Model.Temperature
	if c := d.Context; (c.CompactAtTokens > 0 || c.CompactEverySteps > 0) && d.Model.Small != "" {
		keep := c.KeepRecentSteps
		if keep == 0 {
			keep = 3
		}
		a.Compaction = &trace.CompactionPolicy{Alias: d.Model.Small, AtTokens: c.CompactAtTokens, EverySteps: c.CompactEverySteps, KeepSteps: keep}
	}
	return a, nil
}
