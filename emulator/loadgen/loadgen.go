// Package loadgen drives txfence's HTTP API with concurrent clients and
// measures create throughput and latency. The load tool (emulator/cmd/load)
// and the API benchmark (emulator/cmd/benchapi) use it.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Config shapes one run.
type Config struct {
	URLs        []string // API base URLs; clients are spread over them round-robin
	ChainID     uint64
	Signers     []string // from addresses; one = a hot signer
	To          string
	Concurrency int
	Requests    int           // total creates (0: run for Duration)
	Duration    time.Duration // used when Requests is 0
	Timeout     time.Duration // per request
	// Rate, when positive, offers requests at this many per second (open
	// loop) instead of each client sending its next as soon as it has an
	// answer; latency then counts from when a request was due, so a server
	// that falls behind shows it (no coordinated omission). Concurrency
	// bounds the requests in flight.
	Rate float64
}

// Result is what a run measured.
type Result struct {
	Requests  int
	Errors    int
	Statuses  map[int]int
	Elapsed   time.Duration
	Latencies []time.Duration // sorted, successful creates only
}

// PerSecond is successful creates per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Elapsed.Seconds()
}

// Quantile returns the q-quantile (0..1) of successful latencies.
func (r Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)-1))
	return r.Latencies[i]
}

func (r Result) String() string {
	return fmt.Sprintf("%8.0f creates/s  p50 %7s  p95 %7s  p99 %7s  (%d ok, %d errors)",
		r.PerSecond(), round(r.Quantile(0.50)), round(r.Quantile(0.95)), round(r.Quantile(0.99)), len(r.Latencies), r.Errors)
}

func round(d time.Duration) time.Duration {
	switch {
	case d > 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// Run performs the load and returns what it measured. Every request is a
// plain transfer with an explicit gas limit and no request id.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if len(cfg.URLs) == 0 || len(cfg.Signers) == 0 || cfg.Concurrency < 1 {
		return Result{}, fmt.Errorf("loadgen: URLs, signers and a positive concurrency are required")
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		return Result{}, fmt.Errorf("loadgen: give a request count or a duration")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.To == "" {
		cfg.To = "0x000000000000000000000000000000000000dEaD"
	}
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency},
		Timeout:   cfg.Timeout,
	}
	bodies := make([][]byte, len(cfg.Signers))
	for i, s := range cfg.Signers {
		b, _ := json.Marshal(map[string]any{"chainId": cfg.ChainID, "from": s, "to": cfg.To, "value": "1", "gasLimit": 21000})
		bodies[i] = b
	}
	var (
		mu       sync.Mutex
		res      = Result{Statuses: map[int]int{}}
		deadline = time.Now().Add(cfg.Duration)
		wg       sync.WaitGroup
	)
	start := time.Now()
	// A job is a request's index and the time it was due.
	type job struct {
		i   int
		due time.Time
	}
	jobs := make(chan job) // unbuffered: a closed-loop client takes the next when it is free
	go func() {
		defer close(jobs)
		for i := 0; ctx.Err() == nil; i++ {
			if cfg.Requests > 0 && i >= cfg.Requests {
				return
			}
			due := time.Now()
			if cfg.Rate > 0 {
				due = start.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))
				time.Sleep(time.Until(due))
			}
			if cfg.Requests == 0 && due.After(deadline) {
				return
			}
			select {
			case jobs <- job{i, due}:
			case <-ctx.Done():
				return
			}
		}
	}()
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			statuses := map[int]int{}
			errs := 0
			for j := range jobs {
				i, due := j.i, j.due
				if cfg.Rate <= 0 {
					due = time.Now()
				}
				url := cfg.URLs[i%len(cfg.URLs)] + "/v1/transactions"
				status, err := post(ctx, client, url, bodies[i%len(bodies)])
				d := time.Since(due)
				statuses[status]++
				if err != nil || status != http.StatusAccepted {
					errs++
					continue
				}
				lat = append(lat, d)
			}
			mu.Lock()
			res.Latencies = append(res.Latencies, lat...)
			res.Errors += errs
			for k, v := range statuses {
				res.Statuses[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Requests = len(res.Latencies) + res.Errors
	sort.Slice(res.Latencies, func(i, j int) bool { return res.Latencies[i] < res.Latencies[j] })
	return res, nil
}

func post(ctx context.Context, c *http.Client, url string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
