package cluster

// Snapshots: a member behind the leader's compaction point (down longer
// than the log is kept, or restarted with an empty data directory) catches
// up from a copy of the leader's store (package doc, "Snapshots").

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/brokerd/brokerd/index"
	"github.com/brokerd/brokerd/internal/fsutil"
	"github.com/brokerd/brokerd/replica"
	"github.com/brokerd/brokerd/store"
	"github.com/brokerd/brokerd/store/diskstore"
)

// snapService is the client connection stream service a follower fetches
// a snapshot's files over (transport.DialConn).
const snapService = "snapshot"

// The directories in Config.Dir: the snapshots this node made, and the
// one it is receiving. Both are caches: Open removes them.
const (
	snapDirName = "snapshots"
	recvDirName = "snapshot.recv"
)

// on-disk and wire format; never renumber.
const (
	snapMetaMagic  = "brkdsnap"
	snapMetaV1     = 1
	snapRequestV1  = 1
	snapStatusOK   = 0
	snapStatusFail = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// snapIDPattern is a snapshot's id: its applied entry's term and index.
var snapIDPattern = regexp.MustCompile(`^[0-9a-f]{16}-[0-9a-f]{16}$`)

// fetchHook, if set (by tests), runs after each file a fetch received.
var fetchHook func(ctx context.Context, name string)

// snapMeta is what a snapshot holds besides the store's files (its meta
// file): the entry it was taken at, that entry itself and the term of the
// one before (the installing member's log starts with the entry: the
// group's fencing reads the last applied proposal from it), and the
// membership.
type snapMeta struct {
	id          string
	index, term uint64
	prevTerm    uint64
	entryType   pb.EntryType
	entryData   []byte
	conf        []byte // raftpb.ConfState, encoded
	bytes       int64  // the files' total size
	made        time.Time
}

// snapLinger is how long a snapshot no member needs is kept: its links
// hold segment files the store has since removed. (A variable for tests.)
var snapLinger = time.Minute

// encode returns the meta file's bytes:
//
//	magic "brkdsnap" | version 1 | uvarint index, term, prevTerm, entry type |
//	uvarint len, conf | uvarint len, entry data | CRC-32C (4, little-endian) of all before
func (m *snapMeta) encode() []byte {
	b := []byte(snapMetaMagic)
	b = append(b, snapMetaV1)
	for _, v := range []uint64{m.index, m.term, m.prevTerm, uint64(m.entryType), uint64(len(m.conf))} {
		b = binary.AppendUvarint(b, v)
	}
	b = append(b, m.conf...)
	b = binary.AppendUvarint(b, uint64(len(m.entryData)))
	b = append(b, m.entryData...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func decodeSnapMeta(b []byte) (*snapMeta, error) {
	bad := func(what string) error { return fmt.Errorf("snapshot meta: %s", what) }
	if len(b) < len(snapMetaMagic)+1+4 || string(b[:len(snapMetaMagic)]) != snapMetaMagic {
		return nil, bad("not a snapshot's meta file")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, bad("CRC mismatch")
	}
	if v := body[len(snapMetaMagic)]; v != snapMetaV1 {
		return nil, bad(fmt.Sprintf("version %d", v))
	}
	d := body[len(snapMetaMagic)+1:]
	var vals [5]uint64
	for i := range vals {
		v, n := binary.Uvarint(d)
		if n <= 0 {
			return nil, bad("truncated")
		}
		vals[i], d = v, d[n:]
	}
	m := &snapMeta{index: vals[0], term: vals[1], prevTerm: vals[2], entryType: pb.EntryType(vals[3])}
	if vals[4] > uint64(len(d)) {
		return nil, bad("truncated membership")
	}
	m.conf, d = slices.Clone(d[:vals[4]]), d[vals[4]:]
	n, k := binary.Uvarint(d)
	if k <= 0 || n != uint64(len(d)-k) {
		return nil, bad("bad entry length")
	}
	m.entryData = slices.Clone(d[k:])
	return m, nil
}

// raft returns the snapshot as raft sends it: its metadata, and its id as
// the data (the follower fetches the files out of band).
func (m *snapMeta) raft() (*pb.Snapshot, error) {
	cs := &pb.ConfState{}
	if err := proto.Unmarshal(m.conf, cs); err != nil {
		return nil, fmt.Errorf("snapshot %s membership: %w", m.id, err)
	}
	return &pb.Snapshot{Data: []byte(m.id), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(m.index), Term: proto.Uint64(m.term), ConfState: cs}}, nil
}

// snapshots is a Node's: those it made (in Config.Dir/snapshots/<id>, the
// latest two kept) and sends, and the one it installs.
type snapshots struct {
	fs  vfs.FS
	dir string

	mu           sync.Mutex
	latest, prev *snapMeta
	inUse        map[string]int // snapshots being sent
	making       bool
	made         chan struct{} // closed (and replaced) when a making ends
	seq          uint64
	wg           sync.WaitGroup // the maker

	// installing is set while a MsgSnap is handed to supervise;
	// retryAt (unix nanoseconds) holds the next one off after a failed
	// fetch.
	installing atomic.Bool
	retryAt    atomic.Int64

	created, sent, sendFailed, installed, installFailed, bytesSent atomic.Uint64
	lastFetch, lastInstall                                         atomic.Int64 // nanoseconds
}

// Stats are a Node's snapshot counters since Open.
type Stats struct {
	// SnapshotsCreated counts the snapshots this node made as leader;
	// SnapshotsSent those a follower fetched whole, SnapshotSendFailures
	// the fetches that failed, SnapshotBytesSent their bytes.
	SnapshotsCreated, SnapshotsSent, SnapshotSendFailures, SnapshotBytesSent uint64
	// SnapshotsInstalled counts the snapshots this node installed in
	// place of its store; SnapshotInstallFailures the fetches or
	// installs that failed (the leader sends it again).
	SnapshotsInstalled, SnapshotInstallFailures uint64
	// LastSnapshotFetch and LastSnapshotInstall are how long the last
	// snapshot installed took to fetch, and in all (fetch, the store
	// replaced and opened again).
	LastSnapshotFetch, LastSnapshotInstall time.Duration
}

// Stats returns the node's snapshot counters. Safe for concurrent use.
func (c *Node) Stats() Stats {
	sn := &c.snaps
	return Stats{
		SnapshotsCreated: sn.created.Load(), SnapshotsSent: sn.sent.Load(), SnapshotSendFailures: sn.sendFailed.Load(),
		SnapshotBytesSent: sn.bytesSent.Load(), SnapshotsInstalled: sn.installed.Load(), SnapshotInstallFailures: sn.installFailed.Load(),
		LastSnapshotFetch: time.Duration(sn.lastFetch.Load()), LastSnapshotInstall: time.Duration(sn.lastInstall.Load()),
	}
}

// snapshotFor is inc's raftLog.snapshot, on the loop: the latest snapshot
// at or after point, else one is started in the background.
func (c *Node) snapshotFor(inc *incarnation, point uint64) (*pb.Snapshot, error) {
	sn := &c.snaps
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if m := sn.latest; m != nil && m.index >= point {
		return m.raft()
	}
	c.startSnapshotLocked(inc)
	return nil, raft.ErrSnapshotTemporarilyUnavailable
}

// startSnapshotLocked starts making a snapshot of inc's store unless one
// is being made. Under snaps.mu.
func (c *Node) startSnapshotLocked(inc *incarnation) {
	sn := &c.snaps
	if sn.making {
		return
	}
	sn.making = true
	sn.seq++
	seq := sn.seq
	sn.wg.Add(1)
	go func() {
		defer sn.wg.Done()
		c.makeSnapshot(inc, seq)
	}()
}

// snapshotAtLeast returns the id of a snapshot of this node's store at or
// after entry min, made (and waited for) if need be.
func (c *Node) snapshotAtLeast(min uint64) (string, error) {
	sn := &c.snaps
	for range 20 {
		c.mu.Lock()
		inc := c.cur
		c.mu.Unlock()
		if inc == nil {
			return "", errors.New("the store is being reopened")
		}
		sn.mu.Lock()
		if m := sn.latest; m != nil && m.index >= min {
			sn.mu.Unlock()
			return m.id, nil
		}
		if sn.made == nil {
			sn.made = make(chan struct{})
		}
		made := sn.made
		c.startSnapshotLocked(inc)
		sn.mu.Unlock()
		select {
		case <-made:
		case <-c.ctx.Done():
			return "", c.ctx.Err()
		}
	}
	return "", fmt.Errorf("no snapshot at or after entry %d could be made", min)
}

// dropSnapshots removes the node's snapshots once none is needed: made
// over snapLinger ago, not being made or sent, and every follower at or
// past the latest (behind is the lowest match of the followers, as the
// leader sees it; 0 on a node that does not lead, which needs none). On
// the loop (afterCycle): the removal runs in the background.
func (c *Node) dropSnapshots(leading bool, lowest uint64) {
	sn := &c.snaps
	sn.mu.Lock()
	defer sn.mu.Unlock()
	m := sn.latest
	if m == nil || sn.making || time.Since(m.made) < snapLinger || leading && lowest < m.index {
		return
	}
	for _, n := range sn.inUse {
		if n > 0 {
			return
		}
	}
	var ids []string
	for _, x := range []*snapMeta{sn.latest, sn.prev} {
		if x != nil {
			ids = append(ids, x.id)
		}
	}
	sn.latest, sn.prev = nil, nil
	sn.wg.Add(1)
	go func() {
		defer sn.wg.Done()
		for _, id := range ids {
			sn.fs.RemoveAll(filepath.Join(sn.dir, id))
		}
	}()
}

// makeSnapshot makes a snapshot of inc's store, the latest from then on.
func (c *Node) makeSnapshot(inc *incarnation, seq uint64) {
	sn := &c.snaps
	start := time.Now()
	tmp := filepath.Join(sn.dir, fmt.Sprintf("tmp-%d", seq))
	m, err := c.createSnapshot(inc, tmp)
	var stale []string
	defer func() {
		// Outside mu: raft's Snapshot calls wait on it.
		for _, name := range stale {
			sn.fs.RemoveAll(filepath.Join(sn.dir, name))
		}
	}()
	sn.mu.Lock()
	defer sn.mu.Unlock()
	sn.making = false
	if sn.made != nil {
		close(sn.made)
		sn.made = nil
	}
	if err != nil {
		stale = append(stale, filepath.Base(tmp))
		if !errors.Is(err, store.ErrClosed) && !errors.Is(err, replica.ErrLeadershipLost) {
			c.log.Warn("cluster: make a snapshot", "err", err)
		}
		return
	}
	if sn.latest == nil || sn.latest.id != m.id {
		sn.prev, sn.latest = sn.latest, m
	}
	sn.created.Add(1)
	c.log.Info("cluster: snapshot made", "id", m.id, "index", m.index, "bytes", m.bytes, "duration", time.Since(start))
	// Older ones go, unless being sent (the next snapshot's prune takes
	// them): none is served once neither latest nor prev.
	names, _ := sn.fs.List(sn.dir)
	for _, name := range names {
		if name != sn.latest.id && (sn.prev == nil || name != sn.prev.id) && sn.inUse[name] == 0 && !strings.HasPrefix(name, "tmp-") {
			stale = append(stale, name)
		}
	}
}

// createSnapshot writes a snapshot of inc's store into tmp and moves it to
// its id's directory.
func (c *Node) createSnapshot(inc *incarnation, tmp string) (*snapMeta, error) {
	sn := &c.snaps
	if err := sn.fs.MkdirAll(sn.dir, 0o755); err != nil {
		return nil, err
	}
	var m *snapMeta
	_, err := inc.st.CreateSnapshot(tmp, func(gs index.GroupState) error {
		if gs.Applied == 0 {
			return errors.New("nothing applied yet")
		}
		e, prev, err := inc.rlog.entryAt(gs.Applied)
		if err != nil {
			return fmt.Errorf("the log's entry %d: %w", gs.Applied, err)
		}
		if e.GetTerm() != gs.AppliedTerm {
			return fmt.Errorf("the log's entry %d is of term %d, the store applied it as of term %d", gs.Applied, e.GetTerm(), gs.AppliedTerm)
		}
		m = &snapMeta{index: gs.Applied, term: gs.AppliedTerm, prevTerm: prev, entryType: e.GetType(), entryData: e.GetData(), conf: gs.ConfState}
		return writeSynced(sn.fs, filepath.Join(tmp, "meta"), m.encode())
	})
	if err != nil {
		return nil, err
	}
	m.id, m.made = fmt.Sprintf("%016x-%016x", m.term, m.index), time.Now()
	files, err := snapshotFiles(sn.fs, tmp)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		m.bytes += f.size
	}
	final := filepath.Join(sn.dir, m.id)
	if _, err := sn.fs.Stat(final); err == nil {
		sn.fs.RemoveAll(tmp) // the same state, made before
		return m, nil
	}
	if err := sn.fs.Rename(tmp, final); err != nil {
		return nil, err
	}
	return m, nil
}

func writeSynced(fs vfs.FS, name string, b []byte) error {
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

type snapFile struct {
	name string // relative, with '/'
	size int64
}

// snapshotFiles lists a snapshot's files: meta, index/*, segments/*.
func snapshotFiles(fs vfs.FS, dir string) ([]snapFile, error) {
	out := []snapFile{{name: "meta"}}
	for _, sub := range []string{"index", "segments"} {
		names, err := fs.List(filepath.Join(dir, sub))
		if err != nil {
			return nil, err
		}
		slices.Sort(names)
		for _, n := range names {
			out = append(out, snapFile{name: sub + "/" + n})
		}
	}
	for i := range out {
		st, err := fs.Stat(filepath.Join(dir, filepath.FromSlash(out[i].name)))
		if err != nil {
			return nil, err
		}
		if st.IsDir() {
			return nil, fmt.Errorf("snapshot %s: %s is a directory", dir, out[i].name)
		}
		out[i].size = st.Size()
	}
	return out, nil
}

// The file stream, after a request (version 1 | uint16 id length | id |
// uint64 min; an empty id asks for the latest snapshot at or after entry
// min, made if need be):
//
//	status (1): 0 ok | 1 failed, then uint16 length | reason, and nothing more
//	per file: uint16 name length (≥ 1) | name | uint64 size | bytes | CRC-32C of the bytes (4)
//	end: uint16 0 | uint32 number of files
//
// Integers big-endian.

// serveSnapshot sends the snapshot a follower asks for over conn, a
// client connection stream of service "snapshot", and closes it.
func (c *Node) serveSnapshot(conn net.Conn) {
	defer conn.Close()
	sn := &c.snaps
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hdr [3]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil || hdr[0] != snapRequestV1 {
		c.log.Warn("cluster: a bad snapshot request", "err", err, "version", hdr[0])
		return
	}
	req := make([]byte, int(binary.BigEndian.Uint16(hdr[1:]))+8)
	if _, err := io.ReadFull(conn, req); err != nil {
		return
	}
	id, minIndex := req[:len(req)-8], binary.BigEndian.Uint64(req[len(req)-8:])
	conn.SetReadDeadline(time.Time{})
	bw := bufio.NewWriterSize(conn, 1<<20)
	fail := func(reason string) {
		bw.WriteByte(snapStatusFail)
		bw.Write(binary.BigEndian.AppendUint16(nil, uint16(min(len(reason), 1<<16-1))))
		bw.WriteString(reason[:min(len(reason), 1<<16-1)])
		bw.Flush()
	}
	sid := string(id)
	if sid == "" {
		var err error
		if sid, err = c.snapshotAtLeast(minIndex); err != nil {
			fail(fmt.Sprintf("node %s: %v", c.cfg.Name, err))
			return
		}
	}
	sn.mu.Lock()
	ok := snapIDPattern.MatchString(sid) && (sn.latest != nil && sn.latest.id == sid || sn.prev != nil && sn.prev.id == sid)
	if ok {
		if sn.inUse == nil {
			sn.inUse = map[string]int{}
		}
		sn.inUse[sid]++
	}
	sn.mu.Unlock()
	if !ok {
		fail(fmt.Sprintf("node %s has no snapshot %q", c.cfg.Name, sid))
		return
	}
	defer func() {
		sn.mu.Lock()
		sn.inUse[sid]--
		sn.mu.Unlock()
	}()
	n, err := c.sendSnapshot(bw, filepath.Join(sn.dir, sid))
	if err != nil {
		sn.sendFailed.Add(1)
		c.log.Warn("cluster: send a snapshot", "id", sid, "to", conn.RemoteAddr(), "err", err)
		return
	}
	sn.sent.Add(1)
	sn.bytesSent.Add(uint64(n))
	c.log.Info("cluster: snapshot sent", "id", sid, "bytes", n)
}

func (c *Node) sendSnapshot(bw *bufio.Writer, dir string) (int64, error) {
	fs := c.snaps.fs
	files, err := snapshotFiles(fs, dir)
	if err != nil {
		return 0, err
	}
	bw.WriteByte(snapStatusOK)
	var total int64
	for _, sf := range files {
		f, err := fs.Open(filepath.Join(dir, filepath.FromSlash(sf.name)))
		if err != nil {
			return total, err
		}
		var hdr []byte
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(len(sf.name)))
		hdr = append(hdr, sf.name...)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(sf.size))
		bw.Write(hdr)
		crc := crc32.New(crcTable)
		_, err = io.CopyN(io.MultiWriter(bw, crc), f, sf.size)
		f.Close()
		if err != nil {
			return total, fmt.Errorf("send %s: %w", sf.name, err)
		}
		if _, err := bw.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32())); err != nil {
			return total, err
		}
		total += sf.size
	}
	end := binary.BigEndian.AppendUint16(nil, 0)
	bw.Write(binary.BigEndian.AppendUint32(end, uint32(len(files))))
	return total, bw.Flush()
}

// fetchSnapshot receives snapshot id (if empty: the latest at or after
// entry min) from the node named leader into dst (made anew), checking
// every file's CRC, and returns its meta.
func (c *Node) fetchSnapshot(ctx context.Context, leader, id string, min uint64, dst string) (*snapMeta, int64, error) {
	fs := c.snaps.fs
	conn, err := c.tr.DialConn(ctx, leader, snapService, nil)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := append([]byte{snapRequestV1}, binary.BigEndian.AppendUint16(nil, uint16(len(id)))...)
	req = binary.BigEndian.AppendUint64(append(req, id...), min)
	if _, err := conn.Write(req); err != nil {
		return nil, 0, fmt.Errorf("ask %s for snapshot %s: %w", leader, id, err)
	}
	br := bufio.NewReaderSize(conn, 1<<20)
	status, err := br.ReadByte()
	if err != nil {
		return nil, 0, fmt.Errorf("read snapshot %s from %s: %w", id, leader, err)
	}
	if status != snapStatusOK {
		var l [2]byte
		io.ReadFull(br, l[:])
		reason := make([]byte, binary.BigEndian.Uint16(l[:]))
		io.ReadFull(br, reason)
		return nil, 0, fmt.Errorf("%s refused snapshot %s: %s", leader, id, reason)
	}
	if err := fs.RemoveAll(dst); err != nil {
		return nil, 0, err
	}
	for _, d := range []string{"index", "segments"} {
		if err := fs.MkdirAll(filepath.Join(dst, d), 0o755); err != nil {
			return nil, 0, err
		}
	}
	var total int64
	var count uint32
	seen := map[string]bool{}
	for {
		var l [2]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			return nil, total, fmt.Errorf("read snapshot %s: %w", id, err)
		}
		nl := binary.BigEndian.Uint16(l[:])
		if nl == 0 {
			var n [4]byte
			if _, err := io.ReadFull(br, n[:]); err != nil {
				return nil, total, fmt.Errorf("read snapshot %s: %w", id, err)
			}
			if got := binary.BigEndian.Uint32(n[:]); got != count {
				return nil, total, fmt.Errorf("snapshot %s: %d files received, the sender sent %d", id, count, got)
			}
			break
		}
		name := make([]byte, nl)
		var sz [8]byte
		if _, err := io.ReadFull(br, name); err != nil {
			return nil, total, fmt.Errorf("read snapshot %s: %w", id, err)
		}
		if _, err := io.ReadFull(br, sz[:]); err != nil {
			return nil, total, fmt.Errorf("read snapshot %s: %w", id, err)
		}
		if !validSnapName(string(name)) || seen[string(name)] {
			return nil, total, fmt.Errorf("snapshot %s: a file named %q", id, name)
		}
		seen[string(name)] = true
		size := int64(binary.BigEndian.Uint64(sz[:]))
		if size < 0 {
			return nil, total, fmt.Errorf("snapshot %s: %s of %d bytes", id, name, size)
		}
		if err := receiveFile(fs, br, filepath.Join(dst, filepath.FromSlash(string(name))), size); err != nil {
			return nil, total, fmt.Errorf("snapshot %s: %s: %w", id, name, err)
		}
		total += size
		count++
		if fetchHook != nil {
			fetchHook(ctx, string(name))
		}
	}
	for _, d := range []string{"index", "segments", ""} {
		if err := fsutil.SyncDir(fs, filepath.Join(dst, d)); err != nil {
			return nil, total, err
		}
	}
	b, err := readAll(fs, filepath.Join(dst, "meta"))
	if err != nil {
		return nil, total, fmt.Errorf("snapshot %s: %w", id, err)
	}
	m, err := decodeSnapMeta(b)
	if err != nil {
		return nil, total, fmt.Errorf("snapshot %s: %w", id, err)
	}
	m.id, m.bytes = fmt.Sprintf("%016x-%016x", m.term, m.index), total
	if id != "" && m.id != id {
		return nil, total, fmt.Errorf("snapshot %s: its meta is %s's", id, m.id)
	}
	return m, total, nil
}

// validSnapName reports whether name is one a snapshot holds: meta, or a
// plain file name in index/ or segments/.
func validSnapName(name string) bool {
	if name == "meta" {
		return true
	}
	dir, base, ok := strings.Cut(name, "/")
	return ok && (dir == "index" || dir == "segments") && base != "" && base != "." && base != ".." &&
		!strings.ContainsAny(base, "/\\\x00")
}

func receiveFile(fs vfs.FS, r io.Reader, name string, size int64) error {
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	crc := crc32.New(crcTable)
	_, err = io.CopyN(io.MultiWriter(f, crc), r, size)
	if err == nil {
		var b [4]byte
		if _, err = io.ReadFull(r, b[:]); err == nil && binary.BigEndian.Uint32(b[:]) != crc.Sum32() {
			err = errors.New("CRC mismatch")
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readAll(fs vfs.FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// offerSnapshot is the transport handler's look at a MsgSnap for the data
// group, before raft sees it: one for entries this member has committed
// goes to raft (which ignores it and answers how far the member is); any
// other is handed to supervise to install, one at a time (those arriving
// meanwhile are dropped: the leader sends again). It reports whether it
// took the message.
func (c *Node) offerSnapshot(m *pb.Message) bool {
	c.mu.Lock()
	inc := c.cur
	c.mu.Unlock()
	if inc == nil {
		return true // reopening
	}
	hs, _, _ := inc.rlog.InitialState()
	if m.GetSnapshot().GetMetadata().GetIndex() <= hs.GetCommit() {
		return false
	}
	c.handOver(m)
	return true
}

// handOver hands m to supervise to install from, unless an install is
// under way or a failed fetch is too recent (the leader offers again).
func (c *Node) handOver(m *pb.Message) {
	sn := &c.snaps
	if time.Now().UnixNano() < sn.retryAt.Load() || !sn.installing.CompareAndSwap(false, true) {
		return
	}
	select {
	case c.snapReq <- m:
	default:
		sn.installing.Store(false)
	}
}

// fetchRetry is how long after a failed fetch no other is started.
const fetchRetry = time.Second

// lostLog is the transport handler's look at a heartbeat for the data
// group: one whose commit is past this member's last entry comes from a
// leader that believes the member holds entries it lacks — its data
// directory was replaced, and it bootstrapped an empty log. Raft would
// panic on it; instead the member fetches a snapshot at or after that
// commit from the leader (supervise), and the heartbeat is dropped. It
// reports whether it took the message.
func (c *Node) lostLog(m *pb.Message) bool {
	c.mu.Lock()
	inc := c.cur
	c.mu.Unlock()
	if inc == nil {
		return true
	}
	if last, _ := inc.rlog.LastIndex(); m.GetCommit() <= last {
		return false
	}
	c.handOver(m)
	return true
}

// installSnapshot fetches the snapshot m names from its sender and
// installs it in place of the store: the incarnation stops, the store is
// replaced (diskstore.IngestSnapshot: the member's term and vote kept, its
// log starting at the snapshot's entry) and opened again. supervise's
// only. An error is fatal (the store could not be opened again); a failed
// fetch or install is logged, and the old store runs on.
func (c *Node) installSnapshot(m *pb.Message, sv *serving) error {
	sn := &c.snaps
	defer sn.installing.Store(false)
	md := m.GetSnapshot().GetMetadata()
	id, min := string(m.GetSnapshot().GetData()), md.GetIndex()
	pull := m.GetType() == pb.MsgHeartbeat // lostLog's
	if pull {
		id, min = "", m.GetCommit()
	}
	leader := c.nameOf(m.GetFrom())
	if sv.running() || leader == "" || !pull && !snapIDPattern.MatchString(id) {
		return nil
	}
	start := time.Now()
	recv := filepath.Join(c.cfg.Dir, recvDirName)
	defer sn.fs.RemoveAll(recv)
	if pull {
		c.log.Warn("cluster: the leader believes this node holds entries its log lacks (its data directory was replaced?); fetching a snapshot", "leader", leader, "commit", min)
	} else {
		c.log.Info("cluster: behind the leader's log; fetching its snapshot", "leader", leader, "id", id, "index", min)
	}
	meta, n, err := c.fetchSnapshot(c.ctx, leader, id, min, recv)
	if err == nil && !pull && (meta.index != md.GetIndex() || meta.term != md.GetTerm()) {
		err = fmt.Errorf("snapshot %s holds entry %d of term %d, raft sent %d of term %d", id, meta.index, meta.term, md.GetIndex(), md.GetTerm())
	}
	if err != nil {
		sn.installFailed.Add(1)
		sn.retryAt.Store(time.Now().Add(fetchRetry).UnixNano())
		if c.ctx.Err() == nil {
			c.log.Warn("cluster: fetch a snapshot", "leader", leader, "id", id, "err", err)
		}
		return nil
	}
	fetched := time.Since(start)
	c.mu.Lock()
	old := c.cur
	c.cur = nil
	c.mu.Unlock()
	if old == nil {
		return nil
	}
	c.closeIncarnation(old, false)
	for len(c.events) > 0 {
		<-c.events
	}
	hs, _, _ := old.rlog.InitialState()
	// The term and vote survive. The sender leads m's term: if that is
	// newer, this member's vote in it is taken as the sender's (a member
	// whose disk was replaced may have voted in it before; voting for its
	// leader again never elects a second one).
	term, vote := hs.GetTerm(), hs.GetVote()
	if m.GetTerm() > term {
		term, vote = m.GetTerm(), m.GetFrom()
	}
	installed := false
	if hs.GetCommit() < meta.index {
		opts := c.cfg.Store
		opts.Replication = &diskstore.Replication{Group: DataGroup}
		err = diskstore.IngestSnapshot(c.cfg.Dir, recv, opts, diskstore.IngestState{
			Log:       []diskstore.LogEntry{{Group: DataGroup, Term: meta.term, Index: meta.index, Type: uint8(meta.entryType), Data: meta.entryData}},
			PrevTerm:  meta.prevTerm,
			HardState: diskstore.HardState{Group: DataGroup, Term: term, Vote: vote, Commit: meta.index},
		})
		if err != nil {
			sn.installFailed.Add(1)
			c.log.Error("cluster: install a snapshot", "id", id, "err", err)
		} else {
			installed = true
		}
	}
	inc, err := c.open()
	if err != nil {
		return err
	}
	c.start(inc)
	if installed {
		sn.lastFetch.Store(int64(fetched))
		sn.lastInstall.Store(int64(time.Since(start)))
		sn.installed.Add(1)
		c.log.Info("cluster: snapshot installed", "id", meta.id, "index", meta.index, "bytes", n, "fetch", fetched, "total", time.Since(start))
	}
	return nil
}
