package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/testsupport"
)

// emulatorRun is a running emulator process and what its banner said.
type emulatorRun struct {
	banner string
	key    string
	apiURL string
	admin  string // the chain admin endpoint, http://127.0.0.1:<port>
}

// startEmulator builds the function server and the emulator and runs the
// emulator as make dev does, with env added to the test's environment
// (without the variables that would swap its parts for others), until the
// test ends.
func startEmulator(t *testing.T, env ...string) emulatorRun {
	t.Helper()
	dir := t.TempDir()
	build := func(pkg, name string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = testsupport.ModuleRoot(t)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", pkg, b)
		return out
	}
	server, emulator := build("./functions/server", "server"), build("./emulator/cmd/emulator", "emulator")
	port, err := stack.FreePort()
	require.NoError(t, err)
	adminPort, err := stack.FreePort()
	require.NoError(t, err)

	cmd := exec.Command(emulator, "-server", server, "-port", fmt.Sprint(port), "-admin-port", fmt.Sprint(adminPort))
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "DATABASE_URL", "PUBSUB_EMULATOR_HOST", "RPC_URL", "TXFENCE_AUTH":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	logs := &testsupport.SyncBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // as Ctrl-C: the emulator removes its data
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("emulator's log:\n%s", logs.String())
		}
	})

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_ = cmd.Wait()
		close(exited)
	}()
	var banner strings.Builder
	deadline := time.After(3 * time.Minute)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				<-exited
				t.Fatalf("the emulator ended before it was ready:\n%s\n%s", banner.String(), logs.String())
			}
			ready = l == "ready"
			banner.WriteString(l + "\n")
		case <-deadline:
			t.Fatalf("the emulator is not ready after 3 minutes:\n%s", banner.String())
		}
	}
	go func() { // the rest of its output, so that it never blocks on a full pipe
		for range lines {
		}
	}()
	run := emulatorRun{banner: banner.String(), admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort)}
	if m := regexp.MustCompile(`export TXFENCE_KEY=(\S+)`).FindStringSubmatch(run.banner); m != nil {
		run.key = m[1]
	}
	if m := regexp.MustCompile(`(?m)^  API\s+(\S+)$`).FindStringSubmatch(run.banner); m != nil {
		run.apiURL = m[1]
	}
	require.NotEmpty(t, run.key, run.banner)
	require.NotEmpty(t, run.apiURL, run.banner)
	return run
}

// command is the banner's one curl command that matches re.
func (e emulatorRun) command(t *testing.T, re string) string {
	t.Helper()
	var found []string
	for _, c := range curlCommands(e.banner) {
		if regexp.MustCompile(re).MatchString(c) {
			found = append(found, c)
		}
	}
	require.Len(t, found, 1, "the banner's curl matching %s:\n%s", re, e.banner)
	return found[0]
}

// shell runs a command of the banner as a user pastes it, after the
// banner's export, with <id> replaced by id; it returns what it printed.
func (e emulatorRun) shell(t *testing.T, command, id string) []byte {
	t.Helper()
	cmd := exec.Command("bash", "-c", strings.ReplaceAll(command, "<id>", id))
	cmd.Env = append(os.Environ(), "TXFENCE_KEY="+e.key)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", command)
	return out
}

// walkTx is what the walk-through reads of a transaction.
type walkTx struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	Hash       string `json:"hash"`
	ReorgCount int    `json:"reorgCount"`
	History    []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"history"`
}

func (e emulatorRun) tx(t *testing.T, command, id string) walkTx {
	t.Helper()
	out := e.shell(t, command, id)
	var v walkTx
	require.NoError(t, json.Unmarshal(out, &v), "%s", out)
	return v
}

// TestIssue46_LocalStack runs make dev's emulator with TXFENCE_AUTH=apikey in
// the caller's environment, as a user who wants the API as deployed: no
// call passes without a credential, and the printed key works. Then it
// follows the banner's reorg walk-through by running the banner's own curl
// commands, at a user's pace: the held chain keeps the transaction MINED
// for as long as one looks, and the reorg sends it back to TRACKING, after
// which it confirms.
func TestIssue46_LocalStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole local stack")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the walk-through runs the banner's curl commands: curl is not installed")
	}
	e := startEmulator(t, "TXFENCE_AUTH=apikey")
	t.Log(e.banner)

	t.Run("as deployed: API keys only", func(t *testing.T) {
		assert.Contains(t, e.banner, "AUTHENTICATION AS DEPLOYED (TXFENCE_AUTH=apikey)")
		assert.NotContains(t, e.banner, "DEVELOPMENT MODE")
		get := func(bearer string) (int, []byte) {
			req, err := http.NewRequest(http.MethodGet, e.apiURL+"/v1/me", nil)
			require.NoError(t, err)
			if bearer != "" {
				req.Header.Set("Authorization", "Bearer "+bearer)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, body
		}
		status, body := get("")
		assert.Equal(t, http.StatusUnauthorized, status, "a call without a credential is not the development principal: %s", body)
		status, body = get(e.key)
		require.Equal(t, http.StatusOK, status, "%s", body)
		assert.Contains(t, string(body), `"principal":"local-admin"`)
	})

	t.Run("reorg walk-through", func(t *testing.T) {
		hold := e.command(t, `/hold$`)
		create := e.command(t, `-X POST \S+/v1/transactions `)
		follow := e.command(t, `/v1/transactions/<id>$`)
		history := e.command(t, `/v1/transactions/<id>\?include=history`)
		reorg := e.command(t, `/reorg\?depth=1`)

		assert.Contains(t, string(e.shell(t, hold, "")), "the chain stops after the next block")
		created := e.tx(t, create, "")
		require.NotEmpty(t, created.ID, "the create answers the transaction")

		var tx walkTx
		testsupport.EventuallyEvery(t, time.Minute, 200*time.Millisecond, "the transaction is mined", func() bool {
			tx = e.tx(t, follow, created.ID)
			require.NotEqual(t, "CONFIRMED", tx.State, "the held chain confirmed the transaction")
			return tx.State == "MINED"
		})

		// As long as a user takes to read it: blocks that would have
		// confirmed it more than once over are not mined.
		var held holdView
		testsupport.EventuallyEvery(t, time.Minute, 100*time.Millisecond, "the chain is held", func() bool {
			resp, err := http.Get(e.admin + "/hold")
			require.NoError(t, err)
			defer resp.Body.Close()
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&held))
			return held.Skipped >= 5
		})
		assert.True(t, held.Held)
		assert.Equal(t, tx.Hash, held.Tx, "held at the block that mined the transaction")
		tx = e.tx(t, follow, created.ID)
		assert.Equal(t, "MINED", tx.State, "still MINED while the chain is held")

		assert.Contains(t, string(e.shell(t, reorg, "")), "reorganised the last 1 blocks")
		testsupport.EventuallyEvery(t, time.Minute, 200*time.Millisecond, "the transaction confirms after the reorg", func() bool {
			tx = e.tx(t, history, created.ID)
			return tx.State == "CONFIRMED"
		})
		assert.Equal(t, 1, tx.ReorgCount)
		var moves []string
		for _, h := range tx.History {
			moves = append(moves, h.From+">"+h.To)
		}
		assert.Contains(t, moves, "MINED>TRACKING", "the reorg is in its history: %q", moves)
	})
}
