package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/brokerd/brokerd/config"
)

// logSwitch lets SIGHUP change the log format (text or JSON) of loggers
// already handed out: every logger is built on a switchHandler, which
// forwards to the handler of the current format. The level is a
// slog.LevelVar shared by both formats.
//
// Safe for concurrent use: the current handler is an atomic pointer.
type logSwitch struct {
	w     io.Writer
	level *slog.LevelVar
	cur   atomic.Pointer[rootHandler]
}

// rootHandler is one format's handler; gen tells derived handlers that
// their cached copy is stale.
type rootHandler struct {
	h      slog.Handler
	format config.LogFormat
	gen    uint64
}

func newLogSwitch(w io.Writer, level *slog.LevelVar, format config.LogFormat) *logSwitch {
	s := &logSwitch{w: w, level: level}
	s.setFormat(format)
	return s
}

// setFormat makes every logger write in format from now on, and reports
// whether that changed it.
func (s *logSwitch) setFormat(format config.LogFormat) bool {
	old := s.cur.Load()
	if old != nil && old.format == format {
		return false
	}
	opts := &slog.HandlerOptions{Level: s.level}
	var h slog.Handler = slog.NewTextHandler(s.w, opts)
	if format == config.FormatJSON {
		h = slog.NewJSONHandler(s.w, opts)
	}
	var gen uint64
	if old != nil {
		gen = old.gen + 1
	}
	s.cur.Store(&rootHandler{h: h, format: format, gen: gen})
	return true
}

// logger returns a logger writing through the switch.
func (s *logSwitch) logger() *slog.Logger { return slog.New(&switchHandler{sw: s}) }

// switchHandler is a slog.Handler that applies its WithAttrs and
// WithGroup calls (ops) to the switch's current handler, caching the
// result until the format changes.
type switchHandler struct {
	sw    *logSwitch
	ops   []func(slog.Handler) slog.Handler
	cache atomic.Pointer[rootHandler]
}

func (h *switchHandler) current() slog.Handler {
	root := h.sw.cur.Load()
	if c := h.cache.Load(); c != nil && c.gen == root.gen {
		return c.h
	}
	d := root.h
	for _, op := range h.ops {
		d = op(d)
	}
	h.cache.Store(&rootHandler{h: d, format: root.format, gen: root.gen})
	return d
}

func (h *switchHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.current().Enabled(ctx, l)
}

func (h *switchHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.current().Handle(ctx, r)
}

func (h *switchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return h.with(func(d slog.Handler) slog.Handler { return d.WithAttrs(as) })
}

func (h *switchHandler) WithGroup(name string) slog.Handler {
	return h.with(func(d slog.Handler) slog.Handler { return d.WithGroup(name) })
}

func (h *switchHandler) with(op func(slog.Handler) slog.Handler) slog.Handler {
	return &switchHandler{sw: h.sw, ops: append(slices.Clip(h.ops), op)}
}
