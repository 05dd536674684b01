package diskfs

// A simulated disk for the power-loss tests: an FS in memory that
// knows which bytes a sync made durable. A power cut at an operation chosen
// in advance freezes the disk as a machine would leave it: synced data, the
// directory entries of the last directory sync, and of what was written
// since the last sync a prefix (ops in order, the last one torn at any byte).
// Every operation from the cut on fails, as the dead machine's would.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"

	"github.com/turnstile/turnstile/eventstore"
)

// ErrPowerCut is what every operation of a Sim fails with from its power
// cut on.
var ErrPowerCut = errors.New("simulated power cut")

// Sim is the simulated disk. Paths are compared as given (the stores
// always join them from their dirs).
type Sim struct {
	mu      sync.Mutex
	dirs    map[string]bool   // directories (always durable: the test makes them)
	names   map[string]*inode // path → file, as processes see it
	durable map[string]*inode // path → file, as of each directory's last sync
	locks   map[string]bool

	ops   int        // mutating operations so far
	cutAt int        // the operation that meets the power cut (0: none planned)
	rng   *rand.Rand // chooses how much of the unsynced tail survives
	image *Image     // the disk as the cut left it (nil: no cut yet)
	stats CutStats
}

// CutStats count what the cuts met.
type CutStats struct {
	PendingOps int // unsynced operations the cuts found, over all files
	Torn       int // writes that the cut tore in the middle
}

// Stats returns what the cut met.
func (d *Sim) Stats() CutStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// inode is one file: its bytes as processes read them, as the disk holds
// them, and the writes and truncates between the two.
type inode struct {
	data    []byte
	synced  []byte
	pending []pendingOp
}

type pendingOp struct {
	off   int64
	b     []byte // nil: a truncate to off
	trunc bool
}

// Image is the bytes on a disk: path → contents.
type Image struct {
	dirs  []string
	files map[string][]byte
}

var _ FS = (*Sim)(nil)

// NewSim returns an empty disk.
func NewSim() *Sim {
	return &Sim{dirs: map[string]bool{}, names: map[string]*inode{}, durable: map[string]*inode{}, locks: map[string]bool{}}
}

// FromImage is a disk holding img, everything durable, after a reboot.
func FromImage(img *Image) *Sim {
	d := NewSim()
	for _, dir := range img.dirs {
		d.dirs[dir] = true
	}
	for p, b := range img.files {
		n := &inode{data: slices.Clone(b), synced: slices.Clone(b)}
		d.names[p], d.durable[p] = n, n
	}
	return d
}

// PlanCut makes the operation after another n ones meet a power cut,
// tearing the unsynced tail with rng's choices.
func (d *Sim) PlanCut(n int, rng *rand.Rand) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cutAt, d.rng = d.ops+n, rng
}

// CutNow cuts the power now if the planned cut has not come yet.
func (d *Sim) CutNow() *Image {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.image == nil {
		d.cutLocked()
	}
	return d.image
}

// WasCut reports whether the power has been cut.
func (d *Sim) WasCut() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.image != nil
}

// step counts a mutating operation; it fails from the cut on. Under mu.
func (d *Sim) step() error {
	if d.image != nil {
		return ErrPowerCut
	}
	d.ops++
	if d.cutAt > 0 && d.ops >= d.cutAt {
		d.cutLocked()
		return ErrPowerCut
	}
	return nil
}

// cutLocked freezes the disk: for each durable name, its synced bytes plus
// a prefix of its pending operations, the last one of which may be torn.
func (d *Sim) cutLocked() {
	img := &Image{files: map[string][]byte{}}
	for dir := range d.dirs {
		img.dirs = append(img.dirs, dir)
	}
	for p, n := range d.durable {
		b := slices.Clone(n.synced)
		d.stats.PendingOps += len(n.pending)
		if d.rng != nil && len(n.pending) > 0 {
			k := d.rng.IntN(len(n.pending) + 1)
			for _, op := range n.pending[:k] {
				b = apply(b, op)
			}
			if k < len(n.pending) && !n.pending[k].trunc && len(n.pending[k].b) > 1 {
				op := n.pending[k]
				op.b = op.b[:d.rng.IntN(len(op.b))]
				b = apply(b, op)
				d.stats.Torn++
			}
		}
		img.files[p] = b
	}
	d.image = img
}

func apply(b []byte, op pendingOp) []byte {
	if op.trunc {
		if int64(len(b)) >= op.off {
			return b[:op.off]
		}
		return append(b, make([]byte, op.off-int64(len(b)))...)
	}
	if end := op.off + int64(len(op.b)); end > int64(len(b)) {
		b = append(b, make([]byte, end-int64(len(b)))...)
	}
	copy(b[op.off:], op.b)
	return b
}

func (d *Sim) ReadDir(dir string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.dirs[dir] {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var out []string
	for p := range d.names {
		if filepath.Dir(p) == dir {
			out = append(out, filepath.Base(p))
		}
	}
	slices.Sort(out)
	return out, nil
}

func (d *Sim) MkdirAll(dir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ; dir != "." && dir != "/" && !d.dirs[dir]; dir = filepath.Dir(dir) {
		d.dirs[dir] = true
	}
	return nil
}

func (d *Sim) Open(path string) (File, error) { return d.open(path, false) }

func (d *Sim) OpenRW(path string) (File, error) { return d.open(path, true) }

func (d *Sim) open(path string, rw bool) (File, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.names[path]
	if n == nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return &diskFile{d: d, n: n, path: path, rw: rw}, nil
}

func (d *Sim) Create(path string) (File, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.dirs[filepath.Dir(path)] {
		return nil, &fs.PathError{Op: "create", Path: path, Err: fs.ErrNotExist}
	}
	if err := d.step(); err != nil {
		return nil, err
	}
	n := d.names[path]
	if n == nil {
		n = &inode{}
		d.names[path] = n
	} else if len(n.data) > 0 {
		n.data = n.data[:0]
		n.pending = append(n.pending, pendingOp{trunc: true})
	}
	return &diskFile{d: d, n: n, path: path, rw: true}, nil
}

func (d *Sim) Rename(from, to string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.step(); err != nil {
		return err
	}
	n := d.names[from]
	if n == nil {
		return &fs.PathError{Op: "rename", Path: from, Err: fs.ErrNotExist}
	}
	delete(d.names, from)
	d.names[to] = n
	return nil
}

func (d *Sim) Remove(path string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.step(); err != nil {
		return err
	}
	if d.names[path] == nil {
		return &fs.PathError{Op: "remove", Path: path, Err: fs.ErrNotExist}
	}
	delete(d.names, path)
	return nil
}

// SyncDir makes dir's entries as processes see them the durable ones.
func (d *Sim) SyncDir(dir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.step(); err != nil {
		return err
	}
	for p := range d.durable {
		if filepath.Dir(p) == dir && d.names[p] == nil {
			delete(d.durable, p)
		}
	}
	for p, n := range d.names {
		if filepath.Dir(p) == dir {
			d.durable[p] = n
		}
	}
	return nil
}

// Lock holds path in memory: a reboot (FromImage) frees it.
func (d *Sim) Lock(path string) (io.Closer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.locks[path] {
		return nil, fmt.Errorf("embedded: %s: %w", path, eventstore.ErrLocked)
	}
	d.locks[path] = true
	return lockCloser(func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.locks, path)
		return nil
	}), nil
}

type lockCloser func() error

func (l lockCloser) Close() error { return l() }

// diskFile is an open file of a Sim. Reads see what processes see,
// also after a cut (the store under test is only shutting down then).
type diskFile struct {
	d    *Sim
	n    *inode
	path string
	rw   bool
	off  int64 // for Write
}

func (f *diskFile) ReadAt(b []byte, off int64) (int, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(b, f.n.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (f *diskFile) WriteAt(b []byte, off int64) (int, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if !f.rw {
		return 0, &fs.PathError{Op: "write", Path: f.path, Err: fs.ErrPermission}
	}
	op := pendingOp{off: off, b: slices.Clone(b)}
	if f.d.image == nil && f.d.cutAt > 0 && f.d.ops+1 >= f.d.cutAt {
		f.n.pending = append(f.n.pending, op) // in flight when the power goes: a prefix may land
	}
	if err := f.d.step(); err != nil {
		return 0, err
	}
	f.n.data = apply(f.n.data, op)
	f.n.pending = append(f.n.pending, op)
	return len(b), nil
}

func (f *diskFile) Write(b []byte) (int, error) {
	n, err := f.WriteAt(b, f.off)
	f.off += int64(n)
	return n, err
}

func (f *diskFile) Close() error { return nil }

func (f *diskFile) Size() (int64, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	return int64(len(f.n.data)), nil
}

func (f *diskFile) Truncate(size int64) error {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.d.step(); err != nil {
		return err
	}
	op := pendingOp{off: size, trunc: true}
	f.n.data = apply(f.n.data, op)
	f.n.pending = append(f.n.pending, op)
	return nil
}

// Sync and Datasync make every pending operation of the file durable (the
// name of a new file still waits for SyncDir).
func (f *diskFile) Sync() error { return f.sync() }

func (f *diskFile) Datasync() error { return f.sync() }

func (f *diskFile) sync() error {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.d.step(); err != nil {
		return err
	}
	for _, op := range f.n.pending {
		f.n.synced = apply(f.n.synced, op)
	}
	clear(f.n.pending)
	f.n.pending = f.n.pending[:0]
	return nil
}

func (f *diskFile) Writeback(off, n int64) {}
