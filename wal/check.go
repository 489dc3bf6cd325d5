package wal

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Report is what Check found in a log.
type Report struct {
	Files   int // log files
	Records int // intact records read (skip records not counted)
	// First and Last are the LSNs the log spans: the first file's first
	// record and the last intact record before where appending resumes
	// (0, 0 for an empty log).
	First, Last LSN
	// Damage is every damaged span, in log order. Check goes on past
	// damage from the first intact record after it, so one damaged
	// record does not hide another; it stops at a torn write of the last
	// file (Torn), which Open drops as a whole.
	Damage []*CorruptError
}

// Refused returns the damage Open refuses to open the log for: neither a
// torn write at the end of the last file nor covered (Options.Covered).
func (r *Report) Refused() []*CorruptError {
	var out []*CorruptError
	for _, d := range r.Damage {
		if !d.Torn && !d.Covered {
			out = append(out, d)
		}
	}
	return out
}

// Check reads every record of the log in dir, as Open would with
// Options.Covered set to covered, and reports what is damaged. It writes
// nothing and takes no lock: the caller keeps writers away (brokerd holds
// its data directory's lock).
func Check(fs vfs.FS, dir string, covered LSN) (*Report, error) {
	sc, err := scanLog(fs, dir, covered)
	if err != nil {
		return nil, err
	}
	r := &Report{Records: sc.records, Damage: sc.damage}
	if !(len(sc.files) == 1 && sc.create && sc.headerless == "") {
		r.Files = len(sc.files)
		r.First, r.Last = sc.files[0].first, sc.next-1
	}
	return r, nil
}

// Repair changes the log in dir so that Open accepts it, dropping only
// what is damaged. want is what Check reported for it: Repair checks again
// and does nothing if the damage found differs (the log changed). For each
// damage:
//
//   - a damaged span with intact records after it is overwritten by one
//     skip record of the same length carrying the lost LSNs: the records
//     after it, and the LSN chain, stay as they were;
//   - a damaged file header is written again from the file's name;
//   - damage at the end of a file before the last (or a missing file) is
//     replaced by a skip record to the next file's first LSN, and what
//     follows it in the file zeroed;
//   - a torn write at the end of the last file is zeroed, as Open does.
//
// Every file changed is fsync'd. Nothing is written unless every damage
// can be repaired (a span shorter than a record header cannot be; nor can
// files whose LSNs overlap). Repair takes the log's lock: no WAL may be
// open on dir.
func Repair(fs vfs.FS, dir string, covered LSN, want *Report) (*Report, error) {
	lock, err := fs.Lock(fs.PathJoin(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	defer lock.Close()
	got, err := Check(fs, dir, covered)
	if err != nil {
		return nil, err
	}
	if !sameDamage(got.Damage, want.Damage) {
		return nil, errors.New("wal: the log changed since it was checked; check it again")
	}
	var fixes []fix
	var bad []error
	for _, d := range got.Damage {
		f, err := planFix(fs, d, covered)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		fixes = append(fixes, f...)
	}
	if len(bad) > 0 {
		return nil, errors.Join(bad...)
	}
	var synced []string
	for _, f := range fixes {
		if err := f.apply(fs); err != nil {
			return nil, err
		}
		if !slices.Contains(synced, f.path) {
			synced = append(synced, f.path)
		}
	}
	for _, path := range synced {
		if err := syncFile(fs, path); err != nil {
			return nil, err
		}
	}
	return Check(fs, dir, covered)
}

// sameDamage compares two damage lists by where each damage is and what it
// holds.
func sameDamage(a, b []*CorruptError) bool {
	return slices.EqualFunc(a, b, func(x, y *CorruptError) bool {
		return x.File == y.File && x.Offset == y.Offset && x.Reason == y.Reason && x.FirstLSN == y.FirstLSN &&
			x.LastLSN == y.LastLSN && x.End == y.End && x.Torn == y.Torn && x.Covered == y.Covered
	})
}

// fix is one write of a repair: data at off of path, then zeros up to
// zeroTo (if beyond).
type fix struct {
	path   string
	off    int64
	data   []byte
	zeroTo int64
}

// planFix returns the writes that repair d, or why it cannot be repaired.
func planFix(fs vfs.FS, d *CorruptError, covered LSN) ([]fix, error) {
	if d.Header {
		first, ok := parseFileName(fs.PathBase(d.File))
		if !ok {
			return nil, fmt.Errorf("wal: cannot repair %s: not a log file name", d.File)
		}
		return []fix{{path: d.File, off: 0, data: appendFileHeader(nil, first)}}, nil
	}
	dirtyEnd, err := dirtyEnd(fs, d.File)
	if err != nil {
		return nil, err
	}
	switch {
	case d.Torn:
		return []fix{{path: d.File, off: d.Offset, zeroTo: dirtyEnd}}, nil
	case d.End != 0:
		rec, ok := appendSkipRecord(nil, d.FirstLSN, d.NextLSN, int(d.End-d.Offset))
		if !ok {
			return nil, fmt.Errorf("wal: cannot repair %s at offset %d: a damaged span of %d bytes cannot hold a skip record for LSNs %d–%d",
				d.File, d.Offset, d.End-d.Offset, d.FirstLSN, d.NextLSN-1)
		}
		return []fix{{path: d.File, off: d.Offset, data: rec}}, nil
	case d.FirstLSN == 0:
		return nil, fmt.Errorf("wal: cannot repair %s at offset %d: %s", d.File, d.Offset, d.Reason)
	}
	// The end of a file: nothing intact follows in it.
	next := d.LastLSN + 1
	if d.LastLSN == 0 { // the last file, in covered records (as Open)
		next = covered + 1
	}
	f := fix{path: d.File, off: d.Offset, zeroTo: dirtyEnd}
	if next > d.FirstLSN {
		f.data, _ = appendSkipRecord(nil, d.FirstLSN, next, recordHeaderSize+skipNextSize)
	}
	return []fix{f}, nil
}

// dirtyEnd returns the offset after the last non-zero byte of the file.
func dirtyEnd(fs vfs.FS, path string) (int64, error) {
	f, err := fs.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	b, err := readFrom(f, path, 0)
	if err != nil {
		return 0, err
	}
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return int64(n), nil
}

func (x fix) apply(fs vfs.FS) error {
	f, err := fs.OpenReadWrite(x.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("open %s: %w", x.path, err)
	}
	defer f.Close()
	if end := x.off + int64(len(x.data)); x.zeroTo > end {
		if err := zeroAt(f, x.path, end, int(x.zeroTo-end)); err != nil {
			return err
		}
	}
	if len(x.data) > 0 {
		if _, err := f.WriteAt(x.data, x.off); err != nil {
			return fmt.Errorf("write %s: %w", x.path, err)
		}
	}
	return nil
}

// syncFile fsyncs the file at path.
func syncFile(fs vfs.FS, path string) error {
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
