package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

// statLine is a /proc/<pid>/stat line with the given parent and times in
// clock ticks, its command holding a space and a parenthesis.
func statLine(pid, ppid int, utime, stime, cutime, cstime int64) string {
	return fmt.Sprintf("%d (post) gres) S %d %d %d 0 -1 4194560 1234 0 0 0 %d %d %d %d 20 0 1 0 4567 123456789 2345 18446744073709551615",
		pid, ppid, pid, pid, utime, stime, cutime, cstime)
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	st, err := parseStat(statLine(42, 7, 150, 50, 30, 20))
	require.NoError(t, err)
	assert.Equal(t, 7, st.ppid)
	assert.Equal(t, 2500*time.Millisecond, st.cpu, "utime+stime+cutime+cstime = 250 ticks of 10 ms")

	for _, bad := range []string{"", "42 postgres S 1", "42 (postgres) S 1 2 3", "42 (postgres) S x " + "0 0 0 0 0 0 0 0 0 1 1 1 1 0"} {
		_, err := parseStat(bad)
		assert.Error(t, err, "%q", bad)
	}

	own, err := readStat("/proc", os.Getpid())
	require.NoError(t, err, "this process's own stat")
	assert.Equal(t, os.Getppid(), own.ppid)
}

// writeStat writes a fake /proc/<pid>/stat under root.
func writeStat(t *testing.T, root string, pid, ppid int, utime, stime, cutime, cstime int64) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(statLine(pid, ppid, utime, stime, cutime, cstime)+"\n"), 0o644))
}

// TestSpent_Tree: a server's CPU over a window is its and its children's,
// a child that ended inside the window counted through the parent's
// cutime and cstime, a child started inside it counted whole, another
// process's children and the excepted pids left out.
func TestSpent_Tree(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeStat(t, root, 100, 1, 100, 20, 0, 0) // the postmaster
	writeStat(t, root, 101, 100, 300, 100, 0, 0)
	writeStat(t, root, 102, 100, 50, 50, 0, 0)   // the benchmark's own backend
	writeStat(t, root, 200, 1, 900, 900, 0, 0)   // not PostgreSQL
	writeStat(t, root, 201, 200, 900, 900, 0, 0) // another process's child
	before, err := sampleTree(root, 100)
	require.NoError(t, err)
	assert.Len(t, before, 3)

	// 101 spends 60 ticks more and exits: the postmaster waits for it.
	require.NoError(t, os.RemoveAll(filepath.Join(root, "101")))
	writeStat(t, root, 100, 1, 110, 20, 300+60, 100)
	writeStat(t, root, 102, 100, 80, 60, 0, 0)
	writeStat(t, root, 103, 100, 25, 5, 0, 0) // started inside the window
	writeStat(t, root, 201, 200, 5000, 5000, 0, 0)
	after, err := sampleTree(root, 100)
	require.NoError(t, err)

	// postmaster 10 + the exited child 60 + the new child 30 = 100 ticks.
	assert.Equal(t, time.Second, spent(before, after, 102))
	assert.Equal(t, time.Second+400*time.Millisecond, spent(before, after), "with the excepted backend's 40 ticks")
	assert.InDelta(t, 2.5, msPer(time.Second, 400), 1e-9)
	assert.Zero(t, msPer(time.Second, 0))

	pids := samplePIDs(root, []int{100, 999})
	assert.Equal(t, cpuSample{100: 5900 * time.Millisecond}, pids, "a process that cannot be read is left out")
}

// profileBuilder writes a CPU profile.proto as runtime/pprof does.
type profileBuilder struct {
	b    []byte
	strs map[string]uint64
	list []string
}

func (p *profileBuilder) str(s string) uint64 {
	if p.strs == nil {
		p.strs = map[string]uint64{}
		p.str("")
	}
	if i, ok := p.strs[s]; ok {
		return i
	}
	p.strs[s] = uint64(len(p.list))
	p.list = append(p.list, s)
	return p.strs[s]
}

func msg(fields ...func([]byte) []byte) []byte {
	var b []byte
	for _, f := range fields {
		b = f(b)
	}
	return b
}

func varint(n protowire.Number, v uint64) func([]byte) []byte {
	return func(b []byte) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), v)
	}
}

func bytesField(n protowire.Number, v []byte) func([]byte) []byte {
	return func(b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), v)
	}
}

func packed(n protowire.Number, vs ...uint64) func([]byte) []byte {
	var p []byte
	for _, v := range vs {
		p = protowire.AppendVarint(p, v)
	}
	return bytesField(n, p)
}

func (p *profileBuilder) gzipped(t *testing.T) []byte {
	t.Helper()
	for _, s := range p.list {
		p.b = bytesField(6, []byte(s))(p.b)
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, err := zw.Write(p.b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return out.Bytes()
}

// TestParseCPUProfile_Attribution: samples are read with their stacks
// (inlined frames included, location ids packed or not) and their CPU, and
// each goes to the function nearest the root of its stack.
func TestParseCPUProfile_Attribution(t *testing.T) {
	t.Parallel()
	p := &profileBuilder{}
	p.b = bytesField(1, msg(varint(1, p.str("samples")), varint(2, p.str("count"))))(p.b)
	p.b = bytesField(1, msg(varint(1, p.str("cpu")), varint(2, p.str("nanoseconds"))))(p.b)
	names := []string{
		"runtime.futex",
		module + "shared/postgres.(*Store).Allocate",
		module + "shared/app.(*CreateTx).Run",
		module + "functions/api.(*handler).create",
		"net/http.(*conn).serve",
		module + "functions/submit.handle",
		"runtime.gcBgMarkWorker",
		module + "shared/app.(*SweepFinality).sweepSigner",
	}
	for i, n := range names {
		p.b = bytesField(5, msg(varint(1, uint64(i+1)), varint(2, p.str(n))))(p.b)
	}
	loc := func(id uint64, fns ...uint64) {
		var lines []func([]byte) []byte
		lines = append(lines, varint(1, id))
		for _, f := range fns {
			lines = append(lines, bytesField(4, msg(varint(1, f), varint(2, 10))))
		}
		p.b = bytesField(4, msg(lines...))(p.b)
	}
	loc(1, 1)       // runtime.futex
	loc(2, 2, 3, 4) // Allocate inlined into CreateTx.Run inlined into the api handler
	loc(3, 5)       // net/http
	loc(4, 6)       // submit
	loc(5, 7)       // GC
	loc(6, 8)       // finality sweep goroutine
	sample := func(cpu uint64, locs ...uint64) {
		var f []func([]byte) []byte
		if len(locs) > 2 {
			f = append(f, packed(1, locs...))
		} else {
			for _, l := range locs {
				f = append(f, varint(1, l))
			}
		}
		f = append(f, packed(2, cpu/10_000_000, cpu))
		p.b = bytesField(2, msg(f...))(p.b)
	}
	sample(30_000_000, 1, 2, 3) // api, under net/http
	sample(10_000_000, 1, 4, 3) // submit, under net/http
	sample(20_000_000, 5)       // GC
	sample(40_000_000, 1, 6)    // finality's own goroutine
	sample(10_000_000, 3)       // the HTTP server alone

	samples, err := parseCPUProfile(bytes.NewReader(p.gzipped(t)))
	require.NoError(t, err)
	require.Len(t, samples, 5)
	assert.Equal(t, []string{"runtime.futex", names[1], names[2], names[3], "net/http.(*conn).serve"}, samples[0].stack)
	assert.Equal(t, 30*time.Millisecond, samples[0].cpu)

	s := split{}
	s.add(samples)
	assert.Equal(t, split{"Api": 30 * time.Millisecond, "Submit": 10 * time.Millisecond, "FinalitySweep": 40 * time.Millisecond,
		"": 30 * time.Millisecond}, s)

	// The process measured 220 ms (/proc): each share doubles.
	got := attribute([]time.Duration{220 * time.Millisecond}, []split{s})
	assert.Equal(t, 60*time.Millisecond, got["Api"])
	assert.Equal(t, 80*time.Millisecond, got["FinalitySweep"])
	assert.Equal(t, 60*time.Millisecond, got[""])

	_, err = parseCPUProfile(bytes.NewReader([]byte("not gzip")))
	assert.Error(t, err)
}

// TestParseCPUProfile_Runtime: a profile runtime/pprof writes is read, and
// the CPU its samples hold is about what the process spent.
func TestParseCPUProfile_Runtime(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, pprof.StartCPUProfile(&buf))
	start := ownCPU()
	x := 0
	for ownCPU()-start < 300*time.Millisecond {
		for i := range 100_000 {
			x += i
		}
	}
	pprof.StopCPUProfile()
	_ = x
	samples, err := parseCPUProfile(&buf)
	require.NoError(t, err)
	s := split{}
	s.add(samples)
	assert.Greater(t, s.total(), 100*time.Millisecond, "the busy loop's CPU is in the samples")
	var named bool
	for _, p := range samples {
		for _, f := range p.stack {
			named = named || f == module+"emulator/cmd/benchpipe.TestParseCPUProfile_Runtime"
		}
	}
	assert.True(t, named, "stacks carry function names")
}

func ownCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}
