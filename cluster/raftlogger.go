package cluster

import (
	"fmt"
	"log/slog"
)

// raftLogger passes etcd raft's log lines to slog: its info lines
// (elections, leader changes) at info, debug lines dropped.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(...any)              {}
func (r raftLogger) Debugf(f string, v ...any) { r.l.Debug("raft: " + fmt.Sprintf(f, v...)) }
func (r raftLogger) Info(v ...any)             { r.l.Info("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any) {
	r.l.Info("raft: " + fmt.Sprintf(f, v...))
}
func (r raftLogger) Warning(v ...any) { r.l.Warn("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) {
	r.l.Warn("raft: " + fmt.Sprintf(f, v...))
}
func (r raftLogger) Error(v ...any) { r.l.Error("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any) {
	r.l.Error("raft: " + fmt.Sprintf(f, v...))
}
func (r raftLogger) Fatal(v ...any) { panic("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any) {
	panic("raft: " + fmt.Sprintf(f, v...))
}
func (r raftLogger) Panic(v ...any) { panic("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any) {
	panic("raft: " + fmt.Sprintf(f, v...))
}
