package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/txfence/txfence/emulator/stack"
)

// What the pipeline costs in CPU: the function servers' processes and the
// PostgreSQL server's, read from /proc over a window, divided by the
// transactions confirmed in it. Every function server runs every function,
// as `make dev` does, so a process's CPU is split between the functions by
// CPU profiles of it taken over the same window (profiledSplit).

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clockTicks = 100

// procStat is what cpu accounting reads of one /proc/<pid>/stat line.
type procStat struct {
	ppid int
	// cpu is utime + stime + cutime + cstime: the process's own CPU and its
	// waited-for children's, so a child that exits inside a window is not
	// lost from its parent's count.
	cpu time.Duration
}

// parseStat reads the parent pid and the CPU times of a /proc/<pid>/stat
// line. The command, in parentheses, may hold spaces and parentheses
// itself: the fields are counted from the last ')'.
func parseStat(line string) (procStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return procStat{}, errors.New("stat: no command")
	}
	f := strings.Fields(line[i+1:])
	// After the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("stat: %d fields after the command, want at least 15", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("stat: ppid %q", f[1])
	}
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} {
		n, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil || n < 0 {
			return procStat{}, fmt.Errorf("stat: field %d %q", k, f[k])
		}
		ticks += n
	}
	return procStat{ppid: ppid, cpu: time.Duration(ticks) * time.Second / clockTicks}, nil
}

// readStat reads /proc/<pid>/stat under root (/proc).
func readStat(root string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

// cpuSample is the CPU spent so far by each process of a set, by pid.
type cpuSample map[int]time.Duration

// sampleTree reads the CPU of root and of each process whose parent is
// root (PostgreSQL: the postmaster and its backends and workers) from the
// proc file system at procRoot.
func sampleTree(procRoot string, root int) (cpuSample, error) {
	st, err := readStat(procRoot, root)
	if err != nil {
		return nil, err
	}
	s := cpuSample{root: st.cpu}
	dirs, _ := filepath.Glob(filepath.Join(procRoot, "[0-9]*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == root {
			continue
		}
		if c, err := readStat(procRoot, pid); err == nil && c.ppid == root {
			s[pid] = c.cpu
		}
	}
	return s, nil
}

// samplePIDs reads the CPU of each of pids; a process that cannot be read
// is left out.
func samplePIDs(procRoot string, pids []int) cpuSample {
	s := cpuSample{}
	for _, pid := range pids {
		if c, err := readStat(procRoot, pid); err == nil {
			s[pid] = c.cpu
		}
	}
	return s
}

// spent is the CPU the processes of after spent since before, leaving out
// the pids in except. A process absent from before started inside the
// window and counts whole; one absent from after ended inside it, and what
// it spent moved into its parent's cutime and cstime: its count at the
// start is taken off.
func spent(before, after cpuSample, except ...int) time.Duration {
	var d time.Duration
	for pid, c := range after {
		if !slices.Contains(except, pid) {
			d += c - before[pid]
		}
	}
	for pid, c := range before {
		if _, ok := after[pid]; !ok {
			d -= c
		}
	}
	return d
}

// msPer is d in milliseconds per transaction.
func msPer(d time.Duration, txs int) float64 {
	if txs <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / 1000 / float64(txs)
}

// functionOf names the function a CPU profile's sample worked for, from its
// stack (leaf first): the one whose package frame is nearest the root, or,
// for a goroutine a function started (its stack does not reach the
// request), the use case the goroutine belongs to. "" is work no function
// can be told from: the garbage collector, the HTTP server before the
// handler, the Pub/Sub and gRPC clients' own goroutines, a chain lease's
// keeper.
func functionOf(stack []string) string {
	for i := len(stack) - 1; i >= 0; i-- {
		if f := frameFunction(stack[i]); f != "" {
			return f
		}
	}
	return ""
}

const module = "github.com/txfence/txfence/"

// frameRules map a frame's function-name prefix to the function it serves.
var frameRules = []struct{ prefix, function string }{
	{module + "functions/api.", "Api"},
	{module + "functions/submit.", "Submit"},
	{module + "functions/receipt.", "Receipt"},
	{module + "functions/finality.", "FinalitySweep"},
	{module + "functions/resubmit.", "ResubmitSweep"},
	{module + "functions/outbox.", "OutboxSweep"},
	{module + "shared/app.(*SweepFinality)", "FinalitySweep"},
	{module + "shared/app.(*FollowCompletions)", "Api"},
	{module + "shared/app.(*MergedCompletions)", "Api"},
	{module + "shared/app.(*behind)", "Submit"}, // a drain's relay of receipt prompts
}

func frameFunction(frame string) string {
	for _, r := range frameRules {
		if strings.HasPrefix(frame, r.prefix) {
			return r.function
		}
	}
	return ""
}

// profileSample is one sample of a CPU profile: its stack, leaf first, and
// the CPU it stands for.
type profileSample struct {
	stack []string
	cpu   time.Duration
}

// parseCPUProfile reads a CPU profile as Go's runtime/pprof writes it
// (gzipped profile.proto) into its samples. Only the fields attribution
// needs are decoded: sample types, samples, locations' lines, functions'
// names and the string table.
func parseCPUProfile(r io.Reader) ([]profileSample, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	type rawSample struct{ locs, values []uint64 }
	var (
		types     [][2]uint64 // sample types: type and unit, as string indexes
		samples   []rawSample
		locations = map[uint64][]uint64{} // location id → function ids, leaf (innermost inlined) first
		functions = map[uint64]uint64{}   // function id → name's string index
		strs      []string
	)
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case 1: // sample_type
			var t [2]uint64
			err := fields(v, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
				if n == 1 || n == 2 {
					t[n-1] = x
				}
				return nil
			})
			types = append(types, t)
			return err
		case 2: // sample
			var s rawSample
			err := fields(v, func(n protowire.Number, t protowire.Type, p []byte, x uint64) error {
				switch n {
				case 1:
					return repeated(t, p, x, &s.locs)
				case 2:
					return repeated(t, p, x, &s.values)
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case 4: // location
			var id uint64
			var fns []uint64
			err := fields(v, func(n protowire.Number, _ protowire.Type, p []byte, x uint64) error {
				switch n {
				case 1:
					id = x
				case 4: // line
					return fields(p, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
						if n == 1 {
							fns = append(fns, x)
						}
						return nil
					})
				}
				return nil
			})
			locations[id] = fns
			return err
		case 5: // function
			var id, name uint64
			err := fields(v, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
				switch n {
				case 1:
					id = x
				case 2:
					name = x
				}
				return nil
			})
			functions[id] = name
			return err
		case 6: // string_table
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cpuAt := -1
	for i, t := range types {
		if int(t[0]) < len(strs) && int(t[1]) < len(strs) && strs[t[0]] == "cpu" && strs[t[1]] == "nanoseconds" {
			cpuAt = i
		}
	}
	if cpuAt < 0 {
		return nil, errors.New("profile: no cpu/nanoseconds sample type")
	}
	name := func(fn uint64) string {
		if i, ok := functions[fn]; ok && int(i) < len(strs) {
			return strs[i]
		}
		return ""
	}
	out := make([]profileSample, 0, len(samples))
	for _, s := range samples {
		if cpuAt >= len(s.values) {
			return nil, errors.New("profile: a sample without its cpu value")
		}
		var stack []string
		for _, l := range s.locs {
			for _, fn := range locations[l] {
				stack = append(stack, name(fn))
			}
		}
		out = append(out, profileSample{stack: stack, cpu: time.Duration(s.values[cpuAt])})
	}
	return out, nil
}

// fields calls fn for each field of the protobuf message b: its number,
// type, bytes (length-delimited) or value (varint, fixed).
func fields(b []byte, fn func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("profile: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("profile: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// repeated appends a repeated varint field's values, packed (one
// length-delimited run) or not (one varint).
func repeated(typ protowire.Type, packed []byte, x uint64, to *[]uint64) error {
	if typ == protowire.VarintType {
		*to = append(*to, x)
		return nil
	}
	for len(packed) > 0 {
		v, n := protowire.ConsumeVarint(packed)
		if n < 0 {
			return fmt.Errorf("profile: %w", protowire.ParseError(n))
		}
		*to = append(*to, v)
		packed = packed[n:]
	}
	return nil
}

// split is sampled CPU by function ("" for work no function can be told from).
type split map[string]time.Duration

func (s split) add(samples []profileSample) {
	for _, p := range samples {
		s[functionOf(p.stack)] += p.cpu
	}
}

func (s split) total() time.Duration {
	var t time.Duration
	for _, d := range s {
		t += d
	}
	return t
}

// profiler takes back-to-back CPU profiles of each function server through
// its pprof address (TXFENCE_PPROF_ADDR) until stopped, and adds up each
// process's split.
type profiler struct {
	wg     sync.WaitGroup
	stop   chan struct{}
	mu     sync.Mutex
	splits []split
	errs   []error
}

// profileChunk is each profile's length: a window's end falls at most this
// long before the last profile's.
const profileChunk = 2 * time.Second

func startProfiler(ctx context.Context, addrs []string) *profiler {
	p := &profiler{stop: make(chan struct{}), splits: make([]split, len(addrs))}
	client := &http.Client{Timeout: profileChunk + 10*time.Second}
	for i, addr := range addrs {
		p.splits[i] = split{}
		p.wg.Go(func() {
			for {
				select {
				case <-p.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				samples, err := fetchProfile(ctx, client, addr)
				p.mu.Lock()
				if err != nil {
					p.errs = append(p.errs, fmt.Errorf("server %d: %w", i, err))
				} else {
					p.splits[i].add(samples)
				}
				p.mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	return p
}

func fetchProfile(ctx context.Context, client *http.Client, addr string) ([]profileSample, error) {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(profileChunk/time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pprof answered %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return parseCPUProfile(bytes.NewReader(body))
}

// Stop ends the profiles (the one under way completes) and returns each
// server's split.
func (p *profiler) Stop() ([]split, error) {
	close(p.stop)
	p.wg.Wait()
	return p.splits, errors.Join(p.errs...)
}

// attribute shares each process's measured CPU (from /proc) between the
// functions in the proportions its profiles sampled, and adds them up.
func attribute(measured []time.Duration, splits []split) split {
	out := split{}
	for i, s := range splits {
		t := s.total()
		if i >= len(measured) || t <= 0 {
			continue
		}
		for fn, d := range s {
			out[fn] += time.Duration(float64(measured[i]) * float64(d) / float64(t))
		}
	}
	return out
}

// benchApp is the application_name of the benchmark's own connections, so
// that what its polling costs PostgreSQL is left out of the pipeline's.
const benchApp = "benchpipe"

func benchPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = benchApp
	return pgxpool.NewWithConfig(ctx, cfg)
}

// cpuWindow measures the CPU of the function servers and of PostgreSQL
// from its start to its end.
type cpuWindow struct {
	servers    []int
	postmaster int
	before     struct{ servers, pg cpuSample }
	prof       *profiler // nil: no split by function
}

// cpuSpent is what a window measured.
type cpuSpent struct {
	servers   []time.Duration // by process, in order
	functions split           // the servers' CPU by function (nil without profiles)
	pg        time.Duration   // the postmaster and its processes, the benchmark's own backends left out
	pgProcs   int
}

// startCPUWindow samples the servers' and PostgreSQL's CPU now and starts
// profiling the servers at profileAddrs (none: no split by function).
// PostgreSQL's processes are the postmaster, found as the parent of a
// backend of pool, and its children.
func startCPUWindow(ctx context.Context, s *stack.Stack, pool *pgxpool.Pool, profileAddrs []string) (*cpuWindow, error) {
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil, err
	}
	st, err := readStat("/proc", backend)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL's processes must be on this machine to be measured: %w", err)
	}
	w := &cpuWindow{servers: s.ServerPIDs(), postmaster: st.ppid}
	if len(profileAddrs) > 0 {
		w.prof = startProfiler(ctx, profileAddrs)
	}
	w.before.servers = samplePIDs("/proc", w.servers)
	if w.before.pg, err = sampleTree("/proc", w.postmaster); err != nil {
		return nil, err
	}
	return w, nil
}

// end samples again and returns what was spent since the start.
func (w *cpuWindow) end(ctx context.Context, pool *pgxpool.Pool) (cpuSpent, error) {
	servers := samplePIDs("/proc", w.servers)
	pg, err := sampleTree("/proc", w.postmaster)
	if err != nil {
		return cpuSpent{}, err
	}
	var out cpuSpent
	for _, pid := range w.servers {
		out.servers = append(out.servers, servers[pid]-w.before.servers[pid])
	}
	var mine []int
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, benchApp)
	if err != nil {
		return cpuSpent{}, err
	}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return cpuSpent{}, err
		}
		mine = append(mine, pid)
	}
	if err := rows.Err(); err != nil {
		return cpuSpent{}, err
	}
	out.pg, out.pgProcs = spent(w.before.pg, pg, mine...), len(pg)-len(mine)
	if w.prof != nil {
		splits, err := w.prof.Stop()
		if err != nil {
			return cpuSpent{}, fmt.Errorf("profiles of the function servers: %w", err)
		}
		out.functions = attribute(out.servers, splits)
	}
	return out, nil
}

// print reports the CPU per confirmed transaction, per process, function
// and PostgreSQL, and returns the total: servers and PostgreSQL.
func (c cpuSpent) print(txs int, window time.Duration) float64 {
	var servers time.Duration
	var each []string
	for _, d := range c.servers {
		servers += d
		each = append(each, fmt.Sprintf("%.2f", msPer(d, txs)))
	}
	fmt.Printf("\nCPU per confirmed transaction (%d confirmed; from the load's start until the last was CONFIRMED, %.0f s):\n", txs, window.Seconds())
	fmt.Printf("  function servers  %6.2f ms  (by process: %s)\n", msPer(servers, txs), strings.Join(each, " "))
	if c.functions != nil {
		for _, fn := range []string{"Api", "Submit", "Receipt", "FinalitySweep", "ResubmitSweep", "OutboxSweep", ""} {
			name := fn
			if fn == "" {
				name = "not told apart (GC, HTTP, clients)"
			}
			fmt.Printf("    %-36s %6.2f ms\n", name, msPer(c.functions[fn], txs))
		}
	}
	fmt.Printf("  PostgreSQL        %6.2f ms  (the postmaster and %d processes; the benchmark's own queries left out)\n", msPer(c.pg, txs), c.pgProcs-1)
	total := msPer(servers+c.pg, txs)
	fmt.Printf("  total             %6.2f ms\n", total)
	return total
}
