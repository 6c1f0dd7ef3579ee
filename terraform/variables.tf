# Inputs. Only project and image are required; everything else has a
# production-leaning default (chains and the webhook secret may instead be
# written into Secret Manager by the operators). The TXFENCE_* settings that are not exposed here
# keep the defaults of shared/config (docs/configuration.md) and can be set
# through extra_env / function_env.

# --- Where -------------------------------------------------------------------

variable "project" {
  description = "Google Cloud project id to deploy into."
  type        = string
}

variable "region" {
  description = "Region for Cloud Run, Cloud SQL, Cloud Scheduler, the serverless NEG and (unless kms_location is set) the signer key ring."
  type        = string
  default     = "us-central1"
}

variable "image" {
  description = <<-EOT
    Full reference of the txfence image built from functions/Dockerfile, e.g.
    us-central1-docker.pkg.dev/PROJECT/txfence/txfence:abc1234. Used when the
    services and the migrate job are created; later rollouts are done by Cloud
    Build (gcloud run ... update --image), which terraform then leaves alone
    (see lifecycle.ignore_changes in run.tf).
  EOT
  type        = string
}

# --- What txfence talks to -----------------------------------------------------

variable "chains" {
  description = <<-EOT
    EVM chains served: chain id => list of RPC URLs (tried in order). Rendered
    as TXFENCE_CHAINS = "ID=URL|URL,ID=URL" and kept in Secret Manager
    (secret txfence-chains, read by the functions as a secret environment
    variable), because RPC URLs usually carry provider API keys. When set,
    terraform writes it as a new secret version (the value is then in the
    terraform state, which must stay private). null: terraform creates the
    secret empty and the operators add its versions themselves
    (README, "Secrets").
  EOT
  type        = map(list(string))
  sensitive   = true
  default     = null

  validation {
    condition     = var.chains == null || (length(coalesce(var.chains, {})) > 0 && alltrue([for id, urls in coalesce(var.chains, {}) : can(regex("^[1-9][0-9]*$", id)) && length(urls) > 0]))
    error_message = "chains needs at least one entry; keys are positive decimal chain ids, each with at least one RPC URL."
  }
  validation {
    condition     = var.chains == null || alltrue(flatten([for urls in values(coalesce(var.chains, {})) : [for u in urls : can(regex("^(https?|wss?)://", u)) && !strcontains(u, ",") && !strcontains(u, "|")]]))
    error_message = "Every RPC URL must start with http://, https://, ws:// or wss:// and contain neither ',' nor '|' (the TXFENCE_CHAINS separators)."
  }
}

variable "signers" {
  description = <<-EOT
    Signing addresses and their Cloud KMS key versions. Every function gets the
    addresses (TXFENCE_SIGNERS, which the API and the sweeps use to know which
    signers this deployment serves); only the signing functions, Submit and
    ResubmitSweep (fee bumps, cancels, placeholders), get the key references
    (ADDRESS=kms:KEY_VERSION) and KMS permissions. Keys created by this module
    (signer_keys) appear here only after their addresses are derived: see
    README, "Signer keys".
  EOT
  type = list(object({
    address         = string
    kms_key_version = string
  }))
  default = []

  validation {
    condition     = alltrue([for s in var.signers : can(regex("^0x[0-9a-fA-F]{40}$", s.address))])
    error_message = "Each signer address must be 0x followed by 40 hex digits."
  }
  validation {
    condition     = alltrue([for s in var.signers : can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+/cryptoKeyVersions/[0-9]+$", s.kms_key_version))])
    error_message = "Each kms_key_version must be a full name projects/P/locations/L/keyRings/R/cryptoKeys/K/cryptoKeyVersions/N."
  }
  validation {
    condition     = length(distinct([for s in var.signers : lower(s.address)])) == length(var.signers)
    error_message = "A signer address is listed twice."
  }
}

variable "signer_keys" {
  description = "Number of HSM-backed EC_SIGN_SECP256K1_SHA256 keys to create in a key ring of this module (0: bring your own keys through signers). Keys cannot be deleted by terraform (prevent_destroy) and Cloud KMS never deletes key rings, so only ever raise this number."
  type        = number
  default     = 0

  validation {
    condition     = var.signer_keys >= 0 && var.signer_keys == floor(var.signer_keys)
    error_message = "signer_keys must be a non-negative integer."
  }
}

variable "kms_location" {
  description = "Location of the created key ring (null: the region). Must offer the HSM protection level."
  type        = string
  default     = null
}

variable "kms_key_ring" {
  description = "Name of the key ring created for signer_keys."
  type        = string
  default     = "txfence-signers"
}

# --- txfence behaviour ---------------------------------------------------------

variable "finality_mode" {
  description = "TXFENCE_FINALITY_MODE: \"confirmations\" (final at `confirmations` blocks deep) or \"finalized\" (at or below the chain's finalized block)."
  type        = string
  default     = "confirmations"

  validation {
    condition     = contains(["confirmations", "finalized"], var.finality_mode)
    error_message = "finality_mode must be \"confirmations\" or \"finalized\"."
  }
}

variable "confirmations" {
  description = "TXFENCE_CONFIRMATIONS: blocks required in confirmations mode."
  type        = number
  default     = 20

  validation {
    condition     = var.confirmations >= 1
    error_message = "confirmations must be at least 1."
  }
}

variable "max_in_flight" {
  description = "TXFENCE_MAX_IN_FLIGHT: broadcast-but-unmined transactions per signer."
  type        = number
  default     = 64

  validation {
    condition     = var.max_in_flight >= 1
    error_message = "max_in_flight must be at least 1."
  }
}

variable "trace_sample_ratio" {
  description = "TXFENCE_TRACE_SAMPLE_RATIO: the share of traces txfence starts (Pub/Sub-prompted work) that are recorded in Cloud Trace. API requests follow the sampling decision of Cloud Run's front end, which arrives with them."
  type        = number
  default     = 0.01

  validation {
    condition     = var.trace_sample_ratio >= 0 && var.trace_sample_ratio <= 1
    error_message = "trace_sample_ratio must be between 0 and 1."
  }
}

variable "log_level" {
  description = "TXFENCE_LOG_LEVEL for every function: debug, info, warn or error."
  type        = string
  default     = "info"

  validation {
    condition     = contains(["debug", "info", "warn", "error"], var.log_level)
    error_message = "log_level must be debug, info, warn or error."
  }
}

variable "completion_lifecycle_events" {
  description = <<-EOT
    TXFENCE_TOPIC_LIFECYCLE for every function: true publishes the lifecycle
    events (TxAccepted, TxBroadcast, TxReplaced, TxMined, TxReorged, ...) on
    the completion topic besides the outcomes, each with the attribute
    lifecycle = "true", so that a subscription opts in or out with a filter
    (attributes.lifecycle = "true" / NOT attributes:lifecycle). false (the
    default): the topic carries the outcomes only, as before. The feed
    (GET /v1/completions?events=lifecycle) lists them either way. Every
    message, either way, is validated by Pub/Sub against the topic's schema
    (schemas/completion_event.proto).
  EOT
  type        = bool
  default     = false
}

variable "extra_env" {
  description = "Extra environment for every function and the migrate job (e.g. TXFENCE_LEASE_DURATION). Overrides what this module sets; use with care. Never a secret: those live in Secret Manager (secrets.tf)."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for name, value in var.extra_env : !contains(["TXFENCE_CHAINS", "TXFENCE_STUCK_WEBHOOK_SECRET", "TXFENCE_SECRETS"], name) && !can(regex("(?i)password", value))])
    error_message = "extra_env must not carry secrets: TXFENCE_CHAINS and TXFENCE_STUCK_WEBHOOK_SECRET come from Secret Manager (chains, stuck_webhook_secret, named by TXFENCE_SECRETS, which terraform sets), and no value may hold a password (the database uses IAM authentication)."
  }
}

variable "function_env" {
  description = "Extra environment per function, keyed api, submit, receipt, finality, outbox, resubmit. Applied after extra_env."
  type        = map(map(string))
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.function_env) : contains(["api", "submit", "receipt", "finality", "outbox", "resubmit"], k)])
    error_message = "function_env keys must be among api, submit, receipt, finality, outbox, resubmit."
  }
  validation {
    condition     = alltrue(flatten([for env in values(var.function_env) : [for name, value in env : !contains(["TXFENCE_CHAINS", "TXFENCE_STUCK_WEBHOOK_SECRET", "TXFENCE_SECRETS"], name) && !can(regex("(?i)password", value))]]))
    error_message = "function_env must not carry secrets: TXFENCE_CHAINS and TXFENCE_STUCK_WEBHOOK_SECRET come from Secret Manager (named by TXFENCE_SECRETS, which terraform sets), and no value may hold a password (the database uses IAM authentication)."
  }
}

# --- Capacity ------------------------------------------------------------------

variable "min_instances" {
  description = "Minimum Cloud Run instances per function (keys api, submit, receipt, finality, outbox, resubmit); missing keys keep the defaults of main.tf (api 1, others 0)."
  type        = map(number)
  default     = {}
}

variable "max_instances" {
  description = "Maximum Cloud Run instances per function; missing keys keep the defaults of main.tf. Mind the database: max_instances x TXFENCE_DB_MAX_CONNS summed over the functions must stay under the instance's max_connections."
  type        = map(number)
  default     = {}
}

variable "db_pool_sizes" {
  description = "TXFENCE_DB_MAX_CONNS per function (keys api, submit, receipt, finality, outbox, resubmit); missing keys keep the defaults of main.tf (api 10, submit 5, receipt 5, finality 4, outbox 2, resubmit 4). max_instances x pool size, summed, plus 10 must stay within db_max_connections (checked at plan)."
  type        = map(number)
  default     = {}
}

variable "max_delivery_attempts" {
  description = "Pub/Sub deliveries per message before it goes to txfence-deadletter (5-100), for the submit and receipt push subscriptions. A prompt that only waits (receipt not mined yet, signer busy) is acked once a sweep owns its work (60s: about 7 deliveries with the subscriptions' backoff), so these bound how long a failing prompt (RPC or database down) is retried before an operator is told. Keep them above 10."
  type = object({
    submit  = number
    receipt = number
  })
  default = {
    submit  = 10
    receipt = 20
  }

  validation {
    condition     = alltrue([for n in values(var.max_delivery_attempts) : n >= 10 && n <= 100])
    error_message = "max_delivery_attempts values must be between 10 (above the deliveries a waiting prompt gets before a sweep takes over) and 100 (a Pub/Sub limit)."
  }
}

# --- Database ------------------------------------------------------------------

variable "db_instance_name" {
  description = "Cloud SQL instance name of the one database (without shards; with shards each names its own). Instance names cannot be reused for about a week after deletion."
  type        = string
  default     = "txfence"
}

variable "shards" {
  description = <<-EOT
    Signers sharded over several Cloud SQL instances (README, "Scale:
    signers sharded over several databases"). null (the default): one
    database, the instance db_instance_name, reached with
    TXFENCE_DATABASE_URL exactly as before sharding. A list: one instance
    per shard, in TXFENCE_DATABASES order. The first is the home shard
    (policies, API keys, the audit log) and must stay first: it is the
    instance the deployment started with (db_instance_name's, which keeps
    its terraform address), and a later shard may not be named "main".
    Fields: name (the shard's name, [a-z][a-z0-9_-]*, at most 32
    characters), instance (its Cloud SQL instance name) and, optionally,
    tier, max_connections, disk_size_gb and availability_type (the db_*
    variables otherwise). Every function holds a pool on every shard, so
    the connection budget applies to each instance. Two shards or more
    need shard_map.
  EOT
  type = list(object({
    name              = string
    instance          = string
    tier              = optional(string)
    max_connections   = optional(number)
    disk_size_gb      = optional(number)
    availability_type = optional(string)
  }))
  default = null

  validation {
    condition     = var.shards == null || try(length(var.shards) >= 1, false)
    error_message = "shards must list at least one shard, or be null for one database."
  }
  validation {
    condition     = var.shards == null || alltrue([for s in coalesce(var.shards, []) : can(regex("^[a-z][a-z0-9_-]{0,31}$", s.name))])
    error_message = "Each shard name is a lowercase letter then up to 31 of a-z, 0-9, _ and - (shared/config)."
  }
  validation {
    condition     = var.shards == null || length(distinct([for s in coalesce(var.shards, []) : s.name])) == length(coalesce(var.shards, [])) && length(distinct([for s in coalesce(var.shards, []) : s.instance])) == length(coalesce(var.shards, []))
    error_message = "Shard names and instances must each be unique."
  }
  validation {
    condition     = var.shards == null || alltrue([for i, s in coalesce(var.shards, []) : i == 0 || s.name != "main"])
    error_message = "Only the first (home) shard may be named main: terraform keeps the home shard's instance under that key."
  }
}

variable "shard_map" {
  description = "TXFENCE_SHARD_MAP with shards: vN:ADDRESS=SHARD,...[,*=SHARD], which shard holds each signer (README, \"Scale\"). Required with two shards or more; the version only ever grows and a signer never moves by changing it. Empty without shards."
  type        = string
  default     = ""

  validation {
    condition     = var.shard_map == "" || can(regex("^v[1-9][0-9]*:[^,]+(,[^,]+)*$", var.shard_map))
    error_message = "shard_map must be vN: then ADDRESS=SHARD or *=SHARD rules separated by commas."
  }
}

variable "db_tier" {
  description = "Cloud SQL machine tier (Enterprise edition), e.g. db-custom-2-7680 (2 vCPU, 7.5 GB) or, for development, db-f1-micro (shared core, 0.6 GB, no SLA)."
  type        = string
  default     = "db-custom-2-7680"
}

variable "db_max_connections" {
  description = "PostgreSQL max_connections of each instance (a shard may set its own), set as a database flag (changing it restarts the instance). Must cover the functions' pools at their maximum instance counts, a rollout's second revision of the largest and 10 in reserve, with the ordinary peak under the connections alert's threshold (both checked at plan), and suit the tier's memory: 500 for db-custom-2-7680, 50 for db-f1-micro."
  type        = number
  default     = 500

  validation {
    condition     = var.db_max_connections >= 20 && var.db_max_connections <= 10000
    error_message = "db_max_connections must be between 20 and 10000."
  }
}

variable "db_point_in_time_recovery" {
  description = "Keep 7 days of write-ahead logs for point-in-time recovery (restores to any second). Off only for throwaway environments."
  type        = bool
  default     = true
}

variable "db_backups_retained" {
  description = "Daily automated backups kept."
  type        = number
  default     = 14

  validation {
    condition     = var.db_backups_retained >= 1 && var.db_backups_retained <= 365
    error_message = "db_backups_retained must be between 1 and 365."
  }
}

variable "db_availability_type" {
  description = "REGIONAL (high availability, synchronous standby in another zone) or ZONAL. PostgreSQL is txfence's only authority, so REGIONAL is the default."
  type        = string
  default     = "REGIONAL"

  validation {
    condition     = contains(["REGIONAL", "ZONAL"], var.db_availability_type)
    error_message = "db_availability_type must be REGIONAL or ZONAL."
  }
}

variable "db_disk_size_gb" {
  description = "Initial disk size; the disk grows automatically."
  type        = number
  default     = 20
}

variable "db_deletion_protection" {
  description = "Protect the Cloud SQL instance from deletion, both in terraform and in the Cloud SQL API. Set false (and apply) before a deliberate destroy."
  type        = bool
  default     = true
}

# --- API exposure --------------------------------------------------------------

variable "api_domain" {
  description = <<-EOT
    Domain name for the API (e.g. txfence.example.com). When set, an external
    HTTPS load balancer with a Google-managed certificate and Cloud Armor
    fronts the Api service (whose ingress is internal + load balancer
    traffic); https://<api_domain> is also the audience of the callers' ID
    tokens. Point an A record at the api_ip output; the certificate becomes
    ACTIVE once DNS resolves. When empty, no load balancer is created and the
    Api is reachable only from inside the project, or, with
    api_direct_ingress, at its run.app URL with IAM authentication (an ID
    token of a member of api_invoker_members).
  EOT
  type        = string
  default     = ""
}

variable "api_invoker_members" {
  description = <<-EOT
    Members granted roles/run.invoker on the Api service. Empty by default:
    nobody can call the API until this is set, deliberately. Either
    ["allUsers"], which lets the load balancer forward every request that
    Cloud Armor lets through and leaves authentication to txfence itself
    (TXFENCE_AUTH=oidc,apikey: Google ID tokens and txfk_ API keys); or the
    callers' identities (e.g. "serviceAccount:payouts@PROJECT.iam.gserviceaccount.com"),
    which Cloud Run checks too (their ID tokens' audience: api_oidc_audience),
    so API keys then only work with an ID token in X-Serverless-Authorization.
    allUsers / allAuthenticatedUsers are dropped when api_domain is empty, so
    the run.app URL is never public.
  EOT
  type        = list(string)
  default     = []
}

variable "operator_members" {
  description = <<-EOT
    People (or groups) who operate txfence through its API, e.g.
    ["group:txfence-ops@example.com"]: they may impersonate the operator
    service account (txfence-operator) to mint its Google ID tokens, which
    Cloud Run and txfence accept (it is an invoker of the API and, once the
    admin job ran, an admin of every signer). Empty: nobody impersonates it;
    the first admin's API key (Secret Manager) is the way in.
  EOT
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.operator_members : can(regex("^(user|group|serviceAccount|domain):", m))])
    error_message = "Each operator member is user:, group:, serviceAccount: or domain: an identity."
  }
}

variable "first_admin_principal" {
  description = "The principal the admin job makes admin of every signer and gives the first API key (written to the secret txfence-first-admin-key). Empty: the operator service account's email, so that its ID tokens and that key are one principal."
  type        = string
  default     = ""
}

variable "api_allowed_cidrs" {
  description = "Source CIDRs allowed through the load balancer. Non-empty: the Cloud Armor policy rate-limits these and denies everything else (403). Empty: every source is allowed, rate-limited."
  type        = list(string)
  default     = []
}

variable "api_rate_limit" {
  description = "Cloud Armor rate limit on the load balancer, per client IP: at most count requests per interval_sec seconds, then 429 until the rate drops. interval_sec is one of 10, 30, 60, 120, 180, 240, 300, 600, 900, 1200, 1800, 2700, 3600. It bounds floods before they reach Cloud Run; txfence's per-principal limits (TXFENCE_RATE_PER_SECOND) still apply behind it."
  type = object({
    count        = number
    interval_sec = number
  })
  default = {
    count        = 600
    interval_sec = 60
  }

  validation {
    condition     = var.api_rate_limit.count >= 1 && contains([10, 30, 60, 120, 180, 240, 300, 600, 900, 1200, 1800, 2700, 3600], var.api_rate_limit.interval_sec)
    error_message = "api_rate_limit.count must be at least 1 and interval_sec one of 10, 30, 60, 120, 180, 240, 300, 600, 900, 1200, 1800, 2700, 3600."
  }
}

variable "api_ssl_profile" {
  description = "SSL policy profile of the load balancer's HTTPS proxy (always TLS 1.2 or later): MODERN (the broad set of modern ciphers) or RESTRICTED (only the ciphers PCI DSS and similar standards accept)."
  type        = string
  default     = "MODERN"

  validation {
    condition     = contains(["MODERN", "RESTRICTED"], var.api_ssl_profile)
    error_message = "api_ssl_profile must be MODERN or RESTRICTED."
  }
}

variable "api_direct_ingress" {
  description = "Let the Api service's run.app URL accept traffic from the internet (Cloud Run ingress \"all\"). Off by default: the Api accepts only internal traffic and the load balancer's. Callers that come directly still need roles/run.invoker (api_invoker_members; never allUsers without the load balancer). Only for deployments without api_domain: with a load balancer it is ignored, so that nothing bypasses Cloud Armor."
  type        = bool
  default     = false
}

# --- Stuck resolution ----------------------------------------------------------

variable "stuck_policy" {
  description = "TXFENCE_STUCK_POLICY for ResubmitSweep, the one function that resolves STUCK transactions (e.g. \"*=noop,1=webhook\"). Empty: the shared/config default (*=noop)."
  type        = string
  default     = ""
}

variable "stuck_webhook_url" {
  description = "TXFENCE_STUCK_WEBHOOK_URL for ResubmitSweep: where the webhook action asks. Non-empty: terraform also creates the Secret Manager secret txfence-stuck-webhook-secret, which ResubmitSweep (and only it) reads as TXFENCE_STUCK_WEBHOOK_SECRET."
  type        = string
  default     = ""

  validation {
    condition     = var.stuck_webhook_url == "" || can(regex("^https?://[^/]+", var.stuck_webhook_url))
    error_message = "stuck_webhook_url must be empty or an http(s) URL with a host."
  }
}

variable "stuck_webhook_secret" {
  description = "The webhook's HMAC secret (at least 16 characters), written as a version of txfence-stuck-webhook-secret (and so into the terraform state). null: the operators add the secret's versions themselves (README, \"Secrets\")."
  type        = string
  sensitive   = true
  default     = null

  validation {
    condition     = length(var.stuck_webhook_secret == null ? "0123456789abcdef" : var.stuck_webhook_secret) >= 16
    error_message = "stuck_webhook_secret must be at least 16 characters."
  }
}

# --- Network -------------------------------------------------------------------

variable "network_name" {
  description = "Name of the VPC created for txfence (Direct VPC egress of the services, private services access for Cloud SQL); the subnet and the peering range are named after it."
  type        = string
  default     = "txfence"
}

variable "run_subnet_cidr" {
  description = "Range of the subnet the Cloud Run instances take their addresses from (Direct VPC egress: one per instance, twice that during a rollout). /24 covers the default maxima (56 instances)."
  type        = string
  default     = "10.8.0.0/24"

  validation {
    condition     = can(cidrhost(var.run_subnet_cidr, 0)) && tonumber(split("/", var.run_subnet_cidr)[1]) <= 26
    error_message = "run_subnet_cidr must be an IPv4 CIDR of /26 or larger (Direct VPC egress needs at least /26)."
  }
}

variable "sql_psa_prefix_length" {
  description = "Prefix length of the private services access range Cloud SQL's private IP comes from (16-24; Google recommends /20 or larger for room to grow)."
  type        = number
  default     = 20

  validation {
    condition     = var.sql_psa_prefix_length >= 16 && var.sql_psa_prefix_length <= 24
    error_message = "sql_psa_prefix_length must be between 16 and 24."
  }
}

# --- Monitoring ----------------------------------------------------------------

variable "notification_channels" {
  description = "Ids of existing Cloud Monitoring notification channels (projects/P/notificationChannels/N: e-mail, PagerDuty, Slack, ...) that every txfence alert notifies. Empty: the alerts open incidents in the console only."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[0-9]+$", c))])
    error_message = "Each notification channel must be a full id projects/PROJECT/notificationChannels/NUMBER."
  }
}

variable "workload_metric_alerts" {
  description = <<-EOT
    Create the alert conditions that need txfence's own metrics
    (workload.googleapis.com/...) to exist in Cloud Monitoring already: the
    metric-filter conditions on them (today the "metrics not arriving"
    absence alert), which Cloud Monitoring refuses with 404 "Cannot find
    metric(s)" until the metric was written once. Leave it false for the
    first apply of a project; docs/deploy.md turns it on once the first
    OutboxSweep has run, after checking that the metric exists. The
    PromQL alerts on txfence's metrics do not wait for it: their conditions
    set disable_metric_validation, which Cloud Monitoring accepts for a
    metric not written yet.
  EOT
  type        = bool
  default     = false
}

variable "runbook_url" {
  description = "URL of docs/runbook.md as operators read it (the repository's web view); every alert links to its section (#anchor)."
  type        = string
  default     = "https://github.com/txfence/txfence/blob/main/docs/runbook.md"
}

variable "alert_thresholds" {
  description = <<-EOT
    Bounds of the alert policies (monitoring.tf). Fields, all optional:
      fenced_writes          fenced writes in 10 minutes, all instances (5)
      pending_age_seconds    oldest pending transaction of a signer (900: half of
                             TXFENCE_STUCK_AFTER, a warning before STUCK)
      stuck                  transactions entering STUCK in 30 minutes (1)
      api_5xx_ratio          share of API answers that are 5xx over 5 minutes (0.05)
      sql_cpu                Cloud SQL CPU utilization, 0-1, over 10 minutes (0.8)
      sql_connections_ratio  connections in use / db_max_connections (0.8)
      lease_takeovers        lease take-overs in 10 minutes, all signers (10)
      outbox_age_seconds     oldest outbox row waiting to be published (300: five
                             of the OutboxSweep's runs, a minute apart)
      endpoint_bad_seconds   how long an RPC endpoint is lagging or dead before it
                             is alerted (600: longer than a provider's brief
                             hiccup, which the other endpoints cover)
  EOT
  type = object({
    fenced_writes         = optional(number, 5)
    pending_age_seconds   = optional(number, 900)
    stuck                 = optional(number, 1)
    api_5xx_ratio         = optional(number, 0.05)
    sql_cpu               = optional(number, 0.8)
    sql_connections_ratio = optional(number, 0.8)
    lease_takeovers       = optional(number, 10)
    outbox_age_seconds    = optional(number, 300)
    endpoint_bad_seconds  = optional(number, 600)
  })
  default = {}
}

# --- Misc ----------------------------------------------------------------------

variable "scheduler_region" {
  description = "Region of the Cloud Scheduler jobs (null: the region). Cloud Scheduler is not offered in every Cloud Run region."
  type        = string
  default     = null
}

variable "deployer_service_account" {
  description = "Email of the identity that deploys new images (the Cloud Build service account of the trigger running cloudbuild.yaml). When set, it gets roles/run.developer and may act as the txfence runtime service accounts. Empty: grant those yourself."
  type        = string
  default     = ""
}

variable "run_deletion_protection" {
  description = "Terraform-side deletion protection of the Cloud Run services and the migrate job. They hold no state, so it is off by default."
  type        = bool
  default     = false
}
