# Shared settings. Every function is one entry of local.functions; run.tf,
# iam.tf, pubsub.tf and scheduler.tf iterate over it, so a function's
# settings live in one place.

data "google_project" "this" {
  project_id = var.project
}

# APIs the deployment uses. disable_on_destroy = false: turning an API off
# on destroy would break anything else in the project that uses it.
resource "google_project_service" "apis" {
  for_each = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudkms.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtrace.googleapis.com",
    "compute.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "servicenetworking.googleapis.com",
    "sqladmin.googleapis.com",
  ])
  project            = var.project
  service            = each.value
  disable_on_destroy = false
}

locals {
  # Topic ids. The functions read them from TXFENCE_TOPIC_*; the defaults of
  # shared/config and the emulator (emulator/stack) use the same names.
  topics = {
    submit     = "txfence-submit"
    receipt    = "txfence-receipt"
    completion = "txfence-completion"
    deadletter = "txfence-deadletter"
  }

  # Time budgets the functions work within (TXFENCE_SUBMIT_BUDGET,
  # TXFENCE_FINALITY_BUDGET; both are the shared/config defaults). Request
  # timeouts, ack deadlines and Scheduler deadlines are derived from them.
  submit_budget_seconds = 30
  # The finality budget is a little longer than the Scheduler period (a
  # minute), so that the next invocation starts before this one ends and
  # confirmations are never left waiting in a gap between them; while both
  # run, each signer's chain lease lets only one sweep it at a time.
  finality_budget_seconds = 65

  # One entry per deployed function (FUNCTION_TARGET picks it in the shared
  # image). Fields:
  #   service      Cloud Run service name
  #   target       FUNCTION_TARGET (the name registered in functions/*)
  #   trigger      "http" (API), "push" (Pub/Sub push subscription) or
  #                "schedule" (Cloud Scheduler)
  #   timeout      request timeout, seconds
  #   concurrency  requests per instance
  #   min, max     default instance bounds (var.min_instances / max_instances override)
  #   db_conns     TXFENCE_DB_MAX_CONNS: default pool size per instance
  #                and shard (var.db_pool_sizes overrides). Sum over
  #                functions of max x db_conns = api 10x10 + submit 20x5 +
  #                receipt 20x5 + finality 2x4 + outbox 2x2 + resubmit 2x4
  #                = 320 on every shard; with a rollout's second revision
  #                of the largest (100) and 10 reserved for the jobs and
  #                operators, 430 of db_max_connections (500), checked in
  #                sql.tf with the alert threshold.
  #   publishes    topics (keys of local.topics) it writes outbox rows for and
  #                publishes to, as functions/internal/deps.Publishes lists
  #                them (a test compares the two): api creates (submit
  #                prompt); submit marks
  #                TRACKING (receipt) or STUCK (completion) and re-prompts
  #                itself at the end of its budget and after a lease
  #                hand-over (submit); receipt marks MINED, which frees
  #                in-flight room (submit); the finality sweep marks MINED
  #                too (submit), handles reorgs (receipt) and writes outcomes
  #                (completion); the resubmit sweep re-prompts (submit),
  #                tracks replacements (receipt) and reports STUCK
  #                (completion); the outbox sweep relays anyone's rows (all
  #                three).
  #   signs        needs the KMS keys (Submit and ResubmitSweep sign; rebroadcasts reuse
  #                the persisted raw bytes)
  #   chains       dials the chains, so reads TXFENCE_CHAINS (the RPC URLs
  #                and their provider keys); the OutboxSweep only relays the
  #                outbox and gets TXFENCE_CHAINS=none instead
  #   env          function-specific environment
  functions = {
    api = {
      service     = "txfence-api"
      target      = "Api"
      description = "txfence HTTP API (create, query, completions feed, signer status), behind the external HTTPS load balancer."
      trigger     = "http"
      timeout     = 60 # completions long-poll holds up to 30s
      concurrency = 80
      min         = 1 # keeps create latency low and the per-instance allocation batching warm
      max         = 10
      db_conns    = 10
      cpu         = "1"
      memory      = "512Mi"
      publishes   = ["submit"]
      signs       = false
      chains      = true
      env         = {}
    }
    submit = {
      service     = "txfence-submit"
      target      = "Submit"
      description = "txfence Submit: Pub/Sub push from txfence-submit; drains a signer's ALLOCATED transactions (sign with KMS, persist, broadcast)."
      trigger     = "push"
      timeout     = 2 * local.submit_budget_seconds
      concurrency = 10
      min         = 0
      max         = 20
      db_conns    = 5
      cpu         = "1"
      memory      = "512Mi"
      publishes   = ["submit", "receipt", "completion"]
      signs       = true
      chains      = true
      env         = { TXFENCE_SUBMIT_BUDGET = "${local.submit_budget_seconds}s" }
    }
    receipt = {
      service     = "txfence-receipt"
      target      = "Receipt"
      description = "txfence Receipt: Pub/Sub push from txfence-receipt; fetches receipts of TRACKING transactions."
      trigger     = "push"
      timeout     = 60 # > TXFENCE_RECEIPT_WAIT (20s): a check follows the head that long for receipts still missing
      concurrency = 20
      min         = 0
      max         = 20
      db_conns    = 5
      cpu         = "1"
      memory      = "512Mi"
      publishes   = ["submit"]
      signs       = false
      chains      = true
      env         = {}
    }
    finality = {
      service     = "txfence-finality-sweep"
      target      = "FinalitySweep"
      description = "txfence FinalitySweep: Cloud Scheduler every minute; sweeps confirmations, reorgs and outcomes for 65s, until the next minute's run has begun."
      trigger     = "schedule"
      timeout     = 120 # > the ~65s sweep plus start-up and the last pass
      concurrency = 1   # one sweep per instance: it is a long, CPU-light loop
      min         = 0
      max         = 2
      db_conns    = 4
      cpu         = "1"
      memory      = "512Mi"
      publishes   = ["submit", "receipt", "completion"]
      signs       = false
      chains      = true
      env         = { TXFENCE_FINALITY_BUDGET = "${local.finality_budget_seconds}s" }
    }
    outbox = {
      service     = "txfence-outbox-sweep"
      target      = "OutboxSweep"
      description = "txfence OutboxSweep: Cloud Scheduler every minute; publishes outbox rows their writers did not."
      trigger     = "schedule"
      timeout     = 90 # the sweep stops itself after 50s
      concurrency = 1
      min         = 0
      max         = 2
      db_conns    = 2
      cpu         = "1"
      memory      = "512Mi"
      publishes   = ["submit", "receipt", "completion"]
      signs       = false
      chains      = false
      env         = {}
    }
    resubmit = {
      service     = "txfence-resubmit-sweep"
      target      = "ResubmitSweep"
      description = "txfence ResubmitSweep: Cloud Scheduler every minute, sweeping for ~50s; bumps fees, rebroadcasts, works STUCK transactions through the stuck-resolution policy, carries out admin actions."
      trigger     = "schedule"
      timeout     = 120 # > the 50s sweep (TXFENCE_RESUBMIT_BUDGET) plus start-up and the last pass
      concurrency = 1
      min         = 0
      max         = 2
      db_conns    = 4
      cpu         = "1"
      memory      = "512Mi"
      publishes   = ["submit", "receipt", "completion"]
      signs       = true # fee bumps, cancels and placeholders are new signatures
      chains      = true
      env         = {}
    }
  }

  # Instance bounds after the per-function overrides.
  min_instances = { for k, f in local.functions : k => lookup(var.min_instances, k, f.min) }
  max_instances = { for k, f in local.functions : k => lookup(var.max_instances, k, f.max) }
  db_pool_sizes = { for k, f in local.functions : k => lookup(var.db_pool_sizes, k, f.db_conns) }

  # TXFENCE_CHAINS: "ID=URL|URL,ID=URL". Sensitive (RPC URLs carry provider
  # keys): it only ever goes into the txfence-chains secret (secrets.tf).
  chains_env = var.chains == null ? null : join(",", [for id in sort(keys(var.chains)) : "${id}=${join("|", var.chains[id])}"])

  # TXFENCE_SIGNERS: addresses only for the functions that never sign,
  # ADDRESS=kms:KEY_VERSION for Submit.
  signers_addresses_env = join(",", [for s in var.signers : s.address])
  signers_keys_env      = join(",", [for s in var.signers : "${s.address}=kms:${s.kms_key_version}"])

  # Database connection. The functions and the jobs dial Cloud SQL with the
  # Go connector (cloud.google.com/go/cloudsqlconn) at the instance's private
  # IP (TXFENCE_CLOUDSQL_PRIVATE_IP, through Direct VPC egress: network.tf),
  # with automatic IAM database authentication: the login is the runtime
  # service account's IAM database user, no password exists anywhere. The
  # connector encrypts the connection itself, hence sslmode=disable; the
  # DSN host is ignored.
  db_name = "txfence"

  # Environment shared by every function and the jobs.
  common_env = {
    TXFENCE_CLOUDSQL_IAM_AUTH   = "true"
    TXFENCE_CLOUDSQL_PRIVATE_IP = "true"
    TXFENCE_LOG_LEVEL           = var.log_level
  }

  # The databases of each identity (sql.tf): with shards, TXFENCE_DATABASES
  # (NAME@PROJECT:REGION:INSTANCE=URL|..., the home shard first;
  # shared/config/shards.go) and the signer map; with one database,
  # TXFENCE_CLOUDSQL_INSTANCE and TXFENCE_DATABASE_URL, exactly as before
  # sharding (shared/config refuses the two forms together).
  db_env = {
    for k in keys(local.runtime_identities) : k => (
      local.sharded ? merge(
        {
          TXFENCE_DATABASES = join("|", [
            for key in local.shard_keys :
            "${local.db_instances[key].shard}@${google_sql_database_instance.db[key].connection_name}=user=${local.db_users[k]} dbname=${local.db_name} sslmode=disable"
          ])
        },
        var.shard_map != "" ? { TXFENCE_SHARD_MAP = var.shard_map } : {},
        ) : {
        TXFENCE_CLOUDSQL_INSTANCE = google_sql_database_instance.db["main"].connection_name
        TXFENCE_DATABASE_URL      = "user=${local.db_users[k]} dbname=${local.db_name} sslmode=disable"
      }
    )
  }

  # The API's URL as its callers name it: the audience of the Google ID
  # tokens it accepts (TXFENCE_OIDC_AUDIENCE) and, behind the load balancer,
  # the Cloud Run custom audience. Without a load balancer it is the
  # service's deterministic run.app URL (https://SERVICE-PROJECT_NUMBER.REGION.run.app),
  # written out rather than read from the service, which cannot name itself.
  api_url = (
    local.lb_enabled
    ? "https://${var.api_domain}"
    : "https://${local.functions.api.service}-${data.google_project.this.number}.${var.region}.run.app"
  )

  # Authentication of API callers (shared/config: TXFENCE_AUTH is required
  # and dev is refused on Cloud Run). The API accepts Google-signed ID tokens
  # for local.api_url and txfk_ API keys. The other functions serve no API
  # caller (only the pusher's OIDC tokens get through Cloud Run IAM to them),
  # but every process validates TXFENCE_AUTH at start, so they get "apikey",
  # which needs no other setting.
  auth_env = {
    for k, f in local.functions : k => (
      f.trigger == "http"
      ? { TXFENCE_AUTH = "oidc,apikey", TXFENCE_OIDC_AUDIENCE = local.api_url }
      : { TXFENCE_AUTH = "apikey" }
    )
  }

  # Stuck resolution: only ResubmitSweep acts on STUCK transactions, so only
  # it gets the policy and the webhook (whose secret comes from Secret
  # Manager, below).
  stuck_webhook_enabled = var.stuck_webhook_url != ""
  stuck_env = merge(
    var.stuck_policy != "" ? { TXFENCE_STUCK_POLICY = var.stuck_policy } : {},
    local.stuck_webhook_enabled ? { TXFENCE_STUCK_WEBHOOK_URL = var.stuck_webhook_url } : {},
  )

  # Secret environment variables: variable name => key of the secret in
  # secrets.tf, per function. The functions that dial the chains read
  # them; only ResubmitSweep signs webhook requests. Each function's service
  # account may read exactly the secrets listed here for it.
  function_secrets = {
    for k, f in local.functions : k => merge(
      f.chains ? { TXFENCE_CHAINS = "chains" } : {},
      k == "resubmit" && local.stuck_webhook_enabled ? { TXFENCE_STUCK_WEBHOOK_SECRET = "stuck_webhook" } : {},
    )
  }

  # Per-function environment: FUNCTION_TARGET, the shared TXFENCE_* settings,
  # the function's own, then the caller's overrides; never a variable that
  # comes from a secret. Those are named in TXFENCE_SECRETS
  # (NAME=projects/P/secrets/S/versions/latest,...; shared/secrets): each
  # process reads them from Secret Manager when it loads its configuration,
  # rather than Cloud Run at the revision's creation, which fails while a
  # secret the operators fill themselves (chains = null) has no version
  # yet. A process whose secret has no version answers 503 and reads it
  # again at its next request.
  function_env = {
    for k, f in local.functions : k => {
      for name, value in merge(
        local.common_env,
        local.db_env[k],
        {
          FUNCTION_TARGET          = f.target
          TXFENCE_DB_MAX_CONNS     = tostring(local.db_pool_sizes[k])
          TXFENCE_PROJECT          = var.project
          TXFENCE_TOPIC_SUBMIT     = local.topics.submit
          TXFENCE_TOPIC_RECEIPT    = local.topics.receipt
          TXFENCE_TOPIC_COMPLETION = local.topics.completion
          TXFENCE_TOPIC_LIFECYCLE  = tostring(var.completion_lifecycle_events)
          TXFENCE_SIGNERS          = f.signs ? local.signers_keys_env : local.signers_addresses_env
          TXFENCE_FINALITY_MODE    = var.finality_mode
          TXFENCE_CONFIRMATIONS    = tostring(var.confirmations)
          TXFENCE_MAX_IN_FLIGHT    = tostring(var.max_in_flight)
          # Metrics to Cloud Monitoring (workload.googleapis.com/NAME, what
          # monitoring.tf's alerts and dashboard read) and spans to Cloud
          # Trace, in TXFENCE_PROJECT (shared/telemetry).
          TXFENCE_TELEMETRY          = "gcp"
          TXFENCE_TRACE_SAMPLE_RATIO = tostring(var.trace_sample_ratio)
        },
        local.auth_env[k],
        f.chains ? {} : { TXFENCE_CHAINS = "none" },
        k == "resubmit" ? local.stuck_env : {},
        f.env,
        var.extra_env,
        lookup(var.function_env, k, {}),
        length(local.function_secrets[k]) == 0 ? {} : {
          TXFENCE_SECRETS = join(",", [
            for name in sort(keys(local.function_secrets[k])) :
            "${name}=${google_secret_manager_secret.this[local.function_secrets[k][name]].id}/versions/latest"
          ])
        },
      ) : name => value if !contains(keys(local.function_secrets[k]), name)
    }
  }

  # The migrate command reads only the database variables; its pool is
  # small (goose works on a connection or two, plus its session lock's),
  # within the budget's reserve (sql.tf).
  migrate_env = merge(
    local.common_env,
    local.db_env["migrate"],
    { TXFENCE_DB_MAX_CONNS = "4" },
    var.extra_env,
  )

  # The external load balancer exists only with a domain for its certificate.
  lb_enabled = var.api_domain != ""
}
