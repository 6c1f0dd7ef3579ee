package stack

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUTimes is the CPU time (user + system) spent so far by the parts of a
// benchmark: the processes given by pid, the PostgreSQL servers this
// process started (each postmaster and its backends), and this process
// (the load generator).
type CPUTimes struct {
	Procs    time.Duration
	Postgres time.Duration
	Self     time.Duration
}

// Sub is the CPU spent between o and c.
func (c CPUTimes) Sub(o CPUTimes) CPUTimes {
	return CPUTimes{Procs: c.Procs - o.Procs, Postgres: c.Postgres - o.Postgres, Self: c.Self - o.Self}
}

// SampleCPU reads the CPU times of pids, of the PostgreSQL servers this
// process started and of this process from /proc. A process that cannot be
// read counts nothing. Other PostgreSQL servers on the machine (other
// benchmarks', tests') are not counted: only a postmaster whose parent is
// this process, and that postmaster's children.
func SampleCPU(pids []int) CPUTimes {
	var c CPUTimes
	for _, pid := range pids {
		c.Procs += procCPU(pid)
	}
	self := os.Getpid()
	parents := map[int]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		parents[pid] = procParent(pid)
	}
	for pid, ppid := range parents {
		if ppid == self || (ppid != 0 && parents[ppid] == self) {
			c.Postgres += procCPU(pid)
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Self = time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
	}
	return c
}

// procParent is the parent pid of pid (0 when it cannot be read).
func procParent(pid int) int {
	f := procStatFields(pid)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// procStatFields are the fields of /proc/<pid>/stat after the command,
// which may itself hold spaces and parentheses.
func procStatFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clockTick = 100

// procCPU is utime + stime of pid, including its reaped children's.
func procCPU(pid int) time.Duration {
	f := procStatFields(pid)
	// After the command: state(0) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} {
		n, _ := strconv.ParseInt(f[k], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick
}

// Add is c and o together.
func (c CPUTimes) Add(o CPUTimes) CPUTimes {
	return CPUTimes{Procs: c.Procs + o.Procs, Postgres: c.Postgres + o.Postgres, Self: c.Self + o.Self}
}

// ServerPIDs are the process ids of the running function servers, in order
// (a killed server has none), for measuring what each costs.
func (s *Stack) ServerPIDs() []int {
	var pids []int
	for _, srv := range s.servers {
		srv.mu.Lock()
		if !srv.dead && srv.cmd != nil {
			pids = append(pids, srv.cmd.Process.Pid)
		}
		srv.mu.Unlock()
	}
	return pids
}
