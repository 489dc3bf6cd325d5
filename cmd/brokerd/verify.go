package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/brokerd/brokerd/broker"
	"github.com/brokerd/brokerd/config"
	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/internal/datadir"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
	"github.com/brokerd/brokerd/wal"
)

// Exit statuses of brokerd and its offline subcommands.
const (
	exitOK = 0
	// exitFailed: brokerd failed; verify found damage; repair did not
	// repair (declined, or the damage cannot be).
	exitFailed = 1
	// exitUsage: bad flags or configuration; verify or repair could not
	// read the data directory (missing, locked by a running brokerd).
	exitUsage = 2
	// exitDamaged: brokerd refused to start on a damaged data directory.
	// dist/brokerd.service does not restart it (RestartPreventExitStatus):
	// a restart would find the same damage.
	exitDamaged = 3
)

// damageHint is what brokerd logs when it refuses to start on damage.
func damageHint(err error) (string, bool) {
	var we *wal.CorruptError
	var ie *index.CorruptionError
	switch {
	case errors.As(err, &we):
		return "the data directory's WAL is damaged in records brokerd still needs; it will not start and drop them silently: " +
			"`brokerd verify` lists every damage and what it holds, `brokerd repair` drops the damaged records only (it says which first)", true
	case errors.As(err, &ie):
		return "the data directory's index is damaged; it will not start on it: `brokerd verify` lists the damaged files; " +
			"the index cannot be repaired in place: restore the data directory from a backup", true
	}
	return "", false
}

// dataDirFlags parses a subcommand's -config and -data and returns the
// data directory, locked without creating anything.
func dataDirFlags(name string, args []string, stderr io.Writer, extra func(*flag.FlagSet)) (*datadir.Dir, *flag.FlagSet, int) {
	fs := flag.NewFlagSet("brokerd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "TOML configuration `file` (for storage.data_dir)")
	var o config.Overrides
	fs.Func("data", "data `directory` (overrides storage.data_dir)", func(s string) error { o.DataDir = &s; return nil })
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, exitUsage
	}
	cfg, err := loadConfig(*configPath, o)
	if err != nil {
		fmt.Fprintf(stderr, "brokerd %s: %v\n", name, err)
		return nil, nil, exitUsage
	}
	if cfg.Storage.Engine == config.EngineMemory {
		fmt.Fprintf(stderr, "brokerd %s: storage.engine is memory: nothing on disk\n", name)
		return nil, nil, exitUsage
	}
	dir, err := datadir.LockExisting(cfg.Storage.DataDir)
	if err != nil {
		fmt.Fprintf(stderr, "brokerd %s: %v\n", name, err)
		return nil, nil, exitUsage
	}
	return dir, fs, exitOK
}

// runVerify is `brokerd verify`: it reads every WAL record, segment block
// and index block of a stopped broker's data directory, changing nothing,
// and reports what is damaged and what it held. Exit status 0: no damage;
// 1: damage found; 2: the directory could not be read.
func runVerify(args []string, stdout, stderr io.Writer) int {
	dir, _, code := dataDirFlags("verify", args, stderr, nil)
	if code != exitOK {
		return code
	}
	defer dir.Close()
	rep, err := diskstore.Verify(nil, dir.Path)
	if err != nil {
		fmt.Fprintf(stderr, "brokerd verify: %v\n", err)
		return exitUsage
	}
	printVerify(stdout, dir.Path, rep)
	if rep.Damaged() {
		fmt.Fprintln(stdout, "result: DAMAGE FOUND")
		return exitFailed
	}
	fmt.Fprintln(stdout, "result: no damage")
	return exitOK
}

// printVerify writes rep for an operator.
func printVerify(w io.Writer, dir string, rep *diskstore.VerifyReport) {
	names := broker.QueueNames(rep.Definitions)
	if rep.CheckpointKnown {
		fmt.Fprintf(w, "data directory %s, checkpointed through WAL record %d\n", dir, rep.CheckpointLSN)
	} else {
		fmt.Fprintf(w, "data directory %s, checkpoint unknown (the index cannot be read): no WAL damage counts as covered\n", dir)
	}

	// Index.
	var size uint64
	for _, t := range rep.Index {
		size += t.Size
	}
	fmt.Fprintf(w, "index: %d tables, %d bytes\n", len(rep.Index), size)
	if rep.IndexErr != nil {
		fmt.Fprintf(w, "  DAMAGED: %v\n", rep.IndexErr)
	}
	for _, ce := range index.Damaged(rep.Index) {
		fmt.Fprintf(w, "  DAMAGED %s (level %d), holding %s: %v\n", ce.File, ce.Level, ce.Bounds, ce.Err)
	}
	if rep.IndexErr != nil || len(index.Damaged(rep.Index)) > 0 {
		fmt.Fprintln(w, "    brokerd will not start on a damaged index; it cannot be repaired in place: restore the data directory from a backup")
	}

	// WAL.
	if rep.WALErr != nil {
		fmt.Fprintf(w, "wal: cannot read: %v\n", rep.WALErr)
	} else if r := rep.WAL; r != nil {
		fmt.Fprintf(w, "wal: %d files, records %d–%d, %d intact\n", r.Files, r.First, r.Last, r.Records)
		for _, d := range r.Damage {
			printWALDamage(w, d)
		}
	}

	// Segments.
	if rep.SegmentsErr != nil {
		fmt.Fprintf(w, "segments: cannot read: %v\n", rep.SegmentsErr)
	}
	var blocks, blobs int
	for _, f := range rep.Segments {
		blocks += f.Blocks
		blobs += f.Blobs
	}
	fmt.Fprintf(w, "segments: %d files, %d intact blocks holding %d bodies\n", len(rep.Segments), blocks, blobs)
	for _, d := range rep.SegmentDamage {
		what := "block"
		if d.Header {
			what = "file header"
		}
		fmt.Fprintf(w, "  DAMAGED %s %s at offset %d (to %d): %s\n", d.File, what, d.Offset, d.End, d.Reason)
		switch {
		case d.Header:
			fmt.Fprintln(w, "    harmless by itself: the file's blocks are read on their own checksums (damaged ones are listed apart)")
		case !d.Live:
			fmt.Fprintln(w, "    the index does not refer to this file (an unfinished checkpoint's): nothing is lost; the next start removes it")
		default:
			fmt.Fprintf(w, "    %d stored messages lost%s\n", d.Msgs, queueList(d.Queues, names))
			fmt.Fprintln(w, "    the broker takes them out of their queues as it reaches them (messages_damaged; dead-lettered with reason damaged where possible)")
		}
	}
}

// printWALDamage writes one WAL damage and what it means.
func printWALDamage(w io.Writer, d *wal.CorruptError) {
	switch {
	case d.Torn && d.IntactAfter == 0:
		fmt.Fprintf(w, "  torn end of %s at offset %d: a write a crash cut short (records from %d on were never synced); dropped at the next start\n",
			d.File, d.Offset, d.FirstLSN)
		return
	case d.Torn:
		fmt.Fprintf(w, "  DAMAGED %s at offset %d: %s\n", d.File, d.Offset, d.Reason)
		fmt.Fprintf(w, "    looks like a write a crash cut short (unwritten sectors); the next start drops it and the %d intact records after it (%d–%d)\n",
			d.IntactAfter, d.NextLSN, d.IntactLast)
		return
	}
	fmt.Fprintf(w, "  DAMAGED %s at offset %d: %s\n", d.File, d.Offset, d.Reason)
	lost := "no record"
	if n, ok := d.Lost(); !ok {
		lost = fmt.Sprintf("records from %d on", d.FirstLSN)
	} else if n == 1 {
		lost = fmt.Sprintf("record %d", d.FirstLSN)
	} else if n > 1 {
		lost = fmt.Sprintf("records %d–%d (%d)", d.FirstLSN, d.LastLSN, n)
	}
	after := ""
	if d.IntactAfter > 0 {
		after = fmt.Sprintf("; %d intact records follow at offset %d (%d–%d)", d.IntactAfter, d.End, d.NextLSN, d.IntactLast)
	}
	fmt.Fprintf(w, "    holds %s%s\n", lost, after)
	if d.Covered {
		fmt.Fprintln(w, "    harmless: the index already holds what those records did (checkpoint); brokerd starts and steps over it")
	} else {
		fmt.Fprintln(w, "    brokerd refuses to start: `brokerd repair` drops the damaged records only (publishes, acks or definition changes in them are lost)")
	}
}

// queueList formats per-queue counts, largest first: ": 40 in vhost/q, …".
func queueList(qs map[store.QueueID]int, names map[store.QueueID]string) string {
	if len(qs) == 0 {
		return ""
	}
	ids := slices.Collect(maps.Keys(qs))
	slices.SortFunc(ids, func(a, b store.QueueID) int { return cmp.Or(cmp.Compare(qs[b], qs[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, id := range ids {
		name, ok := names[id]
		if !ok {
			name = fmt.Sprintf("queue id %d", id)
		}
		parts = append(parts, fmt.Sprintf("%d in %s", qs[id], name))
	}
	return ": entries " + strings.Join(parts, ", ")
}

// runRepair is `brokerd repair`: on a stopped broker's data directory it
// drops exactly the damaged WAL records that keep brokerd from starting
// (each replaced by a skip record, so the records after it are kept),
// after saying which, and with -yes or a typed "yes". Exit status 0:
// repaired, or nothing to repair; 1: declined, or damage repair cannot
// mend (the index); 2: the directory could not be read.
func runRepair(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var yes *bool
	dir, _, code := dataDirFlags("repair", args, stderr, func(fs *flag.FlagSet) {
		yes = fs.Bool("yes", false, "drop the damaged records without asking")
	})
	if code != exitOK {
		return code
	}
	defer dir.Close()
	rep, err := diskstore.Verify(nil, dir.Path)
	if err != nil {
		fmt.Fprintf(stderr, "brokerd repair: %v\n", err)
		return exitUsage
	}
	printVerify(stdout, dir.Path, rep)
	if rep.IndexErr != nil || len(index.Damaged(rep.Index)) > 0 {
		fmt.Fprintln(stdout, "repair: the index is damaged: repair cannot mend it (nor, without it, tell which WAL records it covers); nothing changed")
		return exitFailed
	}
	if rep.WALErr != nil {
		fmt.Fprintln(stdout, "repair: the WAL cannot be read; nothing changed")
		return exitFailed
	}
	var todo []*wal.CorruptError
	for _, d := range rep.WAL.Damage {
		if !d.Torn || d.IntactAfter > 0 {
			todo = append(todo, d)
		}
	}
	if len(todo) == 0 {
		fmt.Fprintln(stdout, "repair: nothing in the WAL to repair")
		return exitOK
	}
	fmt.Fprintln(stdout, "repair will:")
	for _, d := range todo {
		fmt.Fprintf(stdout, "  %s at offset %d: %s\n", d.File, d.Offset, repairAction(d))
	}
	if !*yes && !confirm(stdin, stdout) {
		fmt.Fprintln(stdout, "repair: not confirmed; nothing changed (run with -yes to skip the question)")
		return exitFailed
	}
	after, err := diskstore.RepairWAL(nil, dir.Path, rep)
	if err != nil {
		fmt.Fprintf(stdout, "repair: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "repair: done; the WAL now reads %d records, %d–%d, and brokerd will start\n", after.Records, after.First, after.Last)
	return exitOK
}

// repairAction says what repair does about d.
func repairAction(d *wal.CorruptError) string {
	switch {
	case d.Header:
		return "write the file header again from the file name (no record dropped)"
	case d.Torn:
		return fmt.Sprintf("drop the torn write from record %d on, and the %d intact records after it, as a start would", d.FirstLSN, d.IntactAfter)
	}
	n, _ := d.Lost()
	switch {
	case d.LastLSN == 0:
		return fmt.Sprintf("drop the damaged end, records from %d on (the checkpoint holds them: nothing is lost)", d.FirstLSN)
	case n == 0:
		return "overwrite bytes that are not a record (no record dropped)"
	case d.IntactAfter > 0:
		return fmt.Sprintf("drop record(s) %d–%d (%d), keeping the %d intact records after them", d.FirstLSN, d.LastLSN, n, d.IntactAfter)
	}
	return fmt.Sprintf("drop record(s) %d–%d (%d), up to the next file", d.FirstLSN, d.LastLSN, n)
}

// confirm asks on w and reads the answer from r: true for "yes" or "y".
func confirm(r io.Reader, w io.Writer) bool {
	fmt.Fprint(w, "Drop them? Type yes to go on: ")
	line, _ := bufio.NewReader(r).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "yes" || a == "y"
}
