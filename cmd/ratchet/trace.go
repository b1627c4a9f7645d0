package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/internal/tracing"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// startTracing turns on OpenTelemetry traces when the config or the OTEL_*
// variables ask for them (see internal/tracing), and returns the engine
// the adapters are given (a span around each decision) and what flushes
// the spans at exit.
func startTracing(ctx context.Context, cfg *config.Config, eng *ledger.Engine, log *slog.Logger) (tracing.Engine, func(), error) {
	opts := tracing.Options{Enabled: cfg.Tracing.Enabled, Endpoint: cfg.Tracing.Endpoint, ServiceVersion: version}
	stop, err := tracing.Setup(ctx, opts)
	if err != nil {
		return tracing.Engine{}, nil, err
	}
	if opts.On() {
		log.Info("tracing on: OpenTelemetry spans exported over OTLP/HTTP", "endpoint", cfg.Tracing.Endpoint)
	}
	flush := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stop(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}
	return tracing.Engine{Engine: eng, IncludeIdempotencyKeys: cfg.Tracing.IncludeIdempotencyKeys}, flush, nil
}
