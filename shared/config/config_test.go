package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func validEnv() map[string]string {
	return map[string]string{
		EnvDatabaseURL: "postgres://u@localhost/txfence",
		EnvChains:      "1337=http://127.0.0.1:8545|http://127.0.0.1:8546,1=https://rpc.example",
		EnvSigners:     "0x00000000000000000000000000000000000000a1=local:env:DEV_KEY,0xdAC17F958D2ee523a2206206994597C13D831ec7",
		EnvAuth:        "apikey",
	}
}

func TestIssue2_Config(t *testing.T) {
	t.Run("defaults follow the design brief", func(t *testing.T) {
		c, err := Load(env(validEnv()))
		require.NoError(t, err)
		assert.Equal(t, 10*time.Second, c.Lease.Duration)
		assert.Equal(t, 3*time.Second, c.Lease.RenewEvery)
		assert.Equal(t, time.Second, c.Lease.ClockSkew)
		assert.Equal(t, 30*time.Second, c.NonceStateTimeout)
		assert.Equal(t, 100, c.BatchSize)
		assert.Equal(t, 60*time.Second, c.ResubmitInterval)
		assert.Equal(t, 15*time.Second, c.RecheckAfter)
		assert.Equal(t, 10, c.MaxRebroadcasts)
		assert.Equal(t, 10, c.ReceiptWorkers)
		assert.Equal(t, 60*time.Second, c.StaleReceiptTimeout)
		assert.EqualValues(t, 20, c.Confirmations)
		assert.Equal(t, FinalityConfirmations, c.FinalityMode)
		require.Len(t, c.Chains, 2)
		assert.Equal(t, []string{"http://127.0.0.1:8545", "http://127.0.0.1:8546"}, c.Chains[0].RPCURLs)
		require.Len(t, c.Signers, 2)
		assert.Equal(t, "local:env:DEV_KEY", c.Signers[0].KeyRef)
		_, ok := c.Signer(common.HexToAddress("0xdac17f958d2ee523a2206206994597c13d831ec7"))
		assert.True(t, ok)
		assert.NotEmpty(t, c.InstanceID)
		again, err := Load(env(validEnv()))
		require.NoError(t, err)
		assert.NotEqual(t, c.InstanceID, again.InstanceID, "two instances of one revision get different ids")
		require.NoError(t, c.Validate())
	})

	t.Run("settings override defaults", func(t *testing.T) {
		e := validEnv()
		e[EnvLeaseDuration] = "4s"
		e[EnvLeaseRenew] = "1s"
		e[EnvBatchSize] = "7"
		e[EnvFinalityMode] = "finalized"
		e[EnvCloudSQLInstance] = "proj:europe-west1:txfence"
		e[EnvCloudSQLIAMAuth] = "true"
		c, err := Load(env(e))
		require.NoError(t, err)
		assert.Equal(t, 4*time.Second, c.Lease.Duration)
		assert.Equal(t, 7, c.BatchSize)
		assert.Equal(t, FinalityFinalized, c.FinalityMode)
		assert.True(t, c.Database.IAMAuth)
	})

	t.Run("missing required settings are each named", func(t *testing.T) {
		_, err := Load(env(map[string]string{}))
		var cerr *Error
		require.ErrorAs(t, err, &cerr)
		assert.True(t, errors.Is(err, ErrConfig))
		assert.Equal(t, []string{EnvAuth, EnvChains, EnvDatabaseURL, EnvSigners}, cerr.Vars())
		for _, v := range cerr.Vars() {
			assert.Contains(t, err.Error(), v)
		}
	})

	bad := []struct {
		env, value, want string
	}{
		{EnvLeaseDuration, "ten seconds", "duration"},
		{EnvLeaseDuration, "-1s", "positive"},
		{EnvLeaseRenew, "20s", "shorter than"},
		{EnvClockSkew, "-5s", "negative"},
		{EnvBatchSize, "0", "between 1 and 10000"},
		{EnvBatchSize, "many", "integer"},
		{EnvBatchWait, "2s", "between 0 and 1s"},
		{EnvContendedWait, "-1ms", "between 0 and 1s"},
		{EnvWorkers, "0", "between 1 and 4096"},
		{EnvMaxInFlight, "0", "at least 1"},
		{EnvDelegatedMaxInFlight, "0", "at least 1"},
		{EnvRPCMaxBatch, "0", "at least 1"},
		{EnvRPCMaxBatch, "ten", "integer"},
		{EnvMaxRebroadcasts, "0", "at least 1"},
		{EnvNonceStateTimeout, "0s", "positive"},
		{EnvFinalityMode, "vibes", `"confirmations" or "finalized"`},
		{EnvConfirmations, "-3", "non-negative integer"},
		{EnvConfirmations, "0", "at least 1"},
		{EnvCloudSQLInstance, "just-a-name", "project:region:instance"},
		{EnvCloudSQLIAMAuth, "yes please", "true or false"},
		{EnvDBMaxConns, "0", "at least 1"},
		{EnvChains, "mainnet=http://x", "positive chain id"},
		{EnvChains, "1=ftp://x", "must start with"},
		{EnvChains, "1=http://u:pw@x:y/v3/KEY", "does not parse"},
		{EnvChains, "1=http://a,1=http://b", "listed twice"},
		{EnvSigners, "0x123", "40 hex digits"},
		{EnvSigners, "0xdAC17F958D2ee523a2206206994597C13D831Ec7", "checksum"},
		{EnvSigners, "0x00000000000000000000000000000000000000a1=vault:x", "key reference"},
		{EnvLogLevel, "loud", "one of debug"},
		{EnvTelemetry, "datadog", "gcp, prometheus or none"},
		{EnvTelemetry, "GCP", "gcp, prometheus or none"},
		{EnvTraceSampleRatio, "1.5", "between 0 and 1"},
		{EnvTraceSampleRatio, "-0.1", "between 0 and 1"},
		{EnvTraceSampleRatio, "often", "number"},
		{EnvMetricsInterval, "1s", "between 10s and 1h"},
		{EnvMetricsInterval, "minutely", "duration"},
		{EnvTelemetry, "none", ""},
		{EnvTelemetry, "prometheus", ""},
		{EnvTopicSubmit, " ", ""}, // blank is treated as unset: the default stands
	}
	for _, tc := range bad {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			e := validEnv()
			e[tc.env] = tc.value
			_, err := Load(env(e))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			var cerr *Error
			require.ErrorAs(t, err, &cerr)
			assert.Equal(t, []string{tc.env}, cerr.Vars(), "exactly the bad variable is named")
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("several bad settings are all reported at once", func(t *testing.T) {
		e := validEnv()
		e[EnvBatchSize] = "-1"
		e[EnvFinalityMode] = "x"
		delete(e, EnvDatabaseURL)
		_, err := Load(env(e))
		var cerr *Error
		require.ErrorAs(t, err, &cerr)
		assert.Equal(t, []string{EnvBatchSize, EnvDatabaseURL, EnvFinalityMode}, cerr.Vars())
		assert.Equal(t, 4, strings.Count(err.Error(), "\n")+1, "a header line and one line per problem")
	})
}

// TestIssue10_Config: the liveness settings: defaults, per-chain fee
// policy, the stuck-resolution rules and the webhook, each bad value named.
func TestIssue10_Config(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		c, err := Load(env(validEnv()))
		require.NoError(t, err)
		assert.Equal(t, 20, c.BumpPercent)
		assert.Equal(t, 30*time.Second, c.BumpAfter)
		assert.Equal(t, 15, c.MaxBumps)
		assert.Equal(t, "1000000", c.MinPriorityFee.String())
		assert.Equal(t, 5*time.Second, c.RetryBackoffMin)
		assert.Equal(t, 10*time.Minute, c.RetryBackoffMax)
		assert.Equal(t, 20*time.Second, c.ReceiptWait)
		f := c.FeesFor(1)
		assert.Equal(t, c.MaxFeeCap, f.MaxFee)
		assert.Equal(t, c.MaxFeeCap, f.MaxTip, "no tip cap: the fee cap bounds the tip")
		assert.Equal(t, "noop", c.StuckActionFor(1, common.Address{}))
	})
	t.Run("per-chain fees over the global ones", func(t *testing.T) {
		e := validEnv()
		e[EnvMaxTipCap] = "5000000000"
		e[EnvChainFees] = "1337:maxFee=200000000000,maxBumps=3; 1:minTip=2000000"
		c, err := Load(env(e))
		require.NoError(t, err)
		local := c.FeeCaps(1337)
		assert.Equal(t, "200000000000", local.MaxFee.String())
		assert.Equal(t, "5000000000", local.MaxTip.String())
		assert.Equal(t, 3, local.MaxBumps)
		main := c.FeesFor(1)
		assert.Equal(t, c.MaxFeeCap, main.MaxFee)
		assert.Equal(t, "2000000", main.MinTip.String())
		assert.Equal(t, c.MaxBumps, main.MaxBumps)
	})
	t.Run("stuck rules: the most specific wins", func(t *testing.T) {
		e := validEnv()
		e[EnvStuckPolicy] = "*=bump,1337=cancel,0x00000000000000000000000000000000000000a1=placeholder,1337:0x00000000000000000000000000000000000000a1=webhook"
		e[EnvStuckWebhookURL] = "https://hooks.example/stuck"
		e[EnvStuckWebhookSecret] = "0123456789abcdef0123"
		c, err := Load(env(e))
		require.NoError(t, err)
		a1 := common.HexToAddress("0xa1")
		other := common.HexToAddress("0xb2")
		assert.Equal(t, "webhook", c.StuckActionFor(1337, a1))
		assert.Equal(t, "placeholder", c.StuckActionFor(1, a1))
		assert.Equal(t, "cancel", c.StuckActionFor(1337, other))
		assert.Equal(t, "bump", c.StuckActionFor(1, other))
		var logged strings.Builder
		slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", slog.Any("webhook", c.StuckWebhook))
		assert.Contains(t, logged.String(), "webhook https://hooks.example")
		assert.NotContains(t, logged.String(), "0123456789abcdef", "the secret is never logged")
		assert.NotContains(t, logged.String(), "/stuck", "nor the URL's path")
		assert.NotContains(t, fmt.Sprint(c.StuckWebhook), "0123456789abcdef")
	})
	bad := []struct {
		env, value, want string
		extra            map[string]string
	}{
		{EnvBumpPercent, "5", "between 10", nil},
		{EnvBumpAfter, "0s", "positive", nil},
		{EnvMaxBumps, "-1", "between 0 and 1000", nil},
		{EnvMinPriorityFee, "-1", "non-negative", nil},
		{EnvMinPriorityFee, "20000000000000000", "tip floor", nil},
		{EnvMaxTipCap, "0", "positive", nil},
		{EnvChainFees, "1337:maxFee=lots", "decimal number of wei", nil},
		{EnvChainFees, "1337:speed=1", "unknown key", nil},
		{EnvChainFees, "99:maxFee=1", "not in", nil},
		{EnvChainFees, "1337:maxFee=1;1337:maxTip=1", "listed twice", nil},
		{EnvChainFees, "1:maxFee=100000000000000000", "above", nil},
		{EnvChainFees, "1:maxFee=100,minTip=1000", "tip floor", nil},
		{EnvRetryBackoffMin, "0s", "positive", nil},
		{EnvRetryBackoffMax, "1s", "at least", nil},
		{EnvResubmitBudget, "0s", "positive", nil},
		{EnvRecheckAfter, "0s", "positive", nil},
		{EnvReceiptWait, "-1s", "between 0 and 10m", nil},
		{EnvReceiptWait, "11m", "between 0 and 10m", nil},
		{EnvStuckPolicy, "*=retry", "noop, bump, cancel, placeholder or webhook", nil},
		{EnvStuckPolicy, "mainnet=cancel", "scope must be", nil},
		{EnvStuckPolicy, "1337:0x12=cancel", "40 hex digits", nil},
		{EnvStuckPolicy, "*=webhook", "", nil}, // reported on the URL, below
		{EnvStuckWebhookURL, "ftp://x", "http(s) URL", map[string]string{EnvStuckWebhookSecret: "0123456789abcdef0123"}},
		{EnvStuckWebhookURL, "https://", "with a host", map[string]string{EnvStuckWebhookSecret: "0123456789abcdef0123"}},
		{EnvStuckWebhookSecret, "short", "at least 16", map[string]string{EnvStuckWebhookURL: "https://hooks.example"}},
		{EnvStuckWebhookTimeout, "2m", "between 0 and 1m", nil},
	}
	for _, tc := range bad {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			e := validEnv()
			e[tc.env] = tc.value
			for k, v := range tc.extra {
				e[k] = v
			}
			_, err := Load(env(e))
			var cerr *Error
			require.ErrorAs(t, err, &cerr)
			if tc.want == "" {
				assert.Equal(t, []string{EnvStuckWebhookURL}, cerr.Vars())
				return
			}
			assert.Equal(t, []string{tc.env}, cerr.Vars(), "exactly the bad variable is named")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestIssue13_TelemetryConfig: where metrics and traces go. Prometheus text
// by default; gcp needs a project, its own or TXFENCE_PROJECT.
// TestChainsErrorsHideRPCURLs: a refused TXFENCE_CHAINS names its RPC URLs
// by scheme and host, never with their user info, path or query.
func TestChainsErrorsHideRPCURLs(t *testing.T) {
	const u = "user:secretpw@rpc.example/v3/PATHKEY123?apikey=QUERYKEY123"
	for _, value := range []string{
		"mainnet=https://" + u,
		"https://" + u,
		"1=ftp://" + u,
		"1=http://user:secretpw@rpc.example:x/v3/PATHKEY123?apikey=QUERYKEY123",
	} {
		e := validEnv()
		e[EnvChains] = value
		_, err := Load(env(e))
		require.Error(t, err, value)
		for _, secret := range []string{"user", "secretpw", "PATHKEY123", "QUERYKEY123"} {
			assert.NotContains(t, err.Error(), secret, value)
		}
	}

	ch := Chain{ID: 1, RPCURLs: []string{"https://" + u, "http://127.0.0.1:8545"}}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", slog.Any("chain", ch))
	for _, text := range []string{ch.String(), fmt.Sprint(ch), fmt.Sprintf("%v", []Chain{ch}), logged.String()} {
		assert.Contains(t, text, "chain 1 [https://rpc.example/... http://127.0.0.1:8545]")
		for _, secret := range []string{"user", "secretpw", "PATHKEY123", "QUERYKEY123"} {
			assert.NotContains(t, text, secret)
		}
	}
}

func TestIssue13_TelemetryConfig(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		c, err := Load(env(validEnv()))
		require.NoError(t, err)
		assert.Equal(t, TelemetryPrometheus, c.Telemetry.Mode)
		assert.Equal(t, 0.01, c.Telemetry.SampleRatio)
		assert.Equal(t, time.Minute, c.Telemetry.Interval)
		assert.Equal(t, "txfence", c.Telemetry.Service)
	})
	t.Run("gcp writes to TXFENCE_PROJECT unless told otherwise", func(t *testing.T) {
		e := validEnv()
		e[EnvTelemetry] = "gcp"
		e[EnvProject] = "p1"
		e["K_SERVICE"] = "txfence-api"
		e[EnvAuth] = "apikey"
		c, err := Load(env(e))
		require.NoError(t, err)
		assert.Equal(t, TelemetryGCP, c.Telemetry.Mode)
		assert.Equal(t, "p1", c.TelemetryProject())
		assert.Equal(t, "txfence-api", c.Telemetry.Service, "the Cloud Run service names the exported resource's job")
		e[EnvTelemetryProject] = "monitoring-host"
		e[EnvTraceSampleRatio] = "0.25"
		e[EnvMetricsInterval] = "30s"
		c, err = Load(env(e))
		require.NoError(t, err)
		assert.Equal(t, "monitoring-host", c.TelemetryProject())
		assert.Equal(t, 0.25, c.Telemetry.SampleRatio)
		assert.Equal(t, 30*time.Second, c.Telemetry.Interval)
	})
	t.Run("gcp without a project names the telemetry project", func(t *testing.T) {
		e := validEnv()
		e[EnvTelemetry] = "gcp"
		_, err := Load(env(e))
		var cerr *Error
		require.ErrorAs(t, err, &cerr)
		assert.Equal(t, []string{EnvTelemetryProject}, cerr.Vars())
		assert.Contains(t, err.Error(), EnvProject, "the message says the project may come from TXFENCE_PROJECT")
	})
}

// TestIssue45_OutboxWithoutChains: TXFENCE_CHAINS=none is a process that
// dials no chain (the OutboxSweep, which terraform gives no RPC URLs);
// without it the variable stays required, and a chain's fee settings
// still need the chain when chains are listed.
func TestIssue45_OutboxWithoutChains(t *testing.T) {
	e := validEnv()
	e[EnvChains] = " none "
	e[EnvChainFees] = "1:maxFee=100000000000"
	c, err := Load(env(e))
	require.NoError(t, err)
	assert.True(t, c.NoChains)
	assert.Empty(t, c.Chains)

	delete(e, EnvChains)
	_, err = Load(env(e))
	var cerr *Error
	require.ErrorAs(t, err, &cerr)
	assert.Contains(t, cerr.Vars(), EnvChains, "without none the chains are required")

	e = validEnv()
	e[EnvChainFees] = "5:maxFee=100000000000"
	_, err = Load(env(e))
	require.ErrorAs(t, err, &cerr)
	assert.Contains(t, cerr.Vars(), EnvChainFees, "fees of a chain that is not listed")
}
