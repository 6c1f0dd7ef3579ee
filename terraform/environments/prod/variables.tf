# Inputs of the prod environment. Values go in terraform.tfvars (copy
# terraform.tfvars.example; kept out of version control).

variable "project" {
  description = "Google Cloud project id of the prod environment."
  type        = string
}

variable "region" {
  description = "Region of everything regional."
  type        = string
  default     = "us-central1"
}

variable "image" {
  description = "Full reference of the txfence image used when the services are created (later rollouts: cloudbuild.yaml)."
  type        = string
}

variable "chains" {
  description = "chain id => RPC URLs, written into Secret Manager (txfence-chains) and so into the state. null (recommended): add the secret's versions yourself (terraform/README.md, Secrets)."
  type        = map(list(string))
  sensitive   = true
  default     = null
}

variable "signers" {
  description = "Signer addresses and their Cloud KMS key versions."
  type = list(object({
    address         = string
    kms_key_version = string
  }))
  default = []
}

variable "signer_keys" {
  description = "HSM signer keys to create (only ever raise it)."
  type        = number
  default     = 0
}

variable "finality_mode" {
  description = "confirmations or finalized."
  type        = string
  default     = "confirmations"
}

variable "completion_lifecycle_events" {
  description = "Publish every lifecycle event on the completion topic (lifecycle=\"true\"), not only the outcomes."
  type        = bool
  default     = false
}

variable "confirmations" {
  description = "Blocks required in confirmations mode."
  type        = number
  default     = 20
}

variable "max_in_flight" {
  description = "Broadcast-but-unmined transactions per signer."
  type        = number
  default     = 64
}

variable "stuck_policy" {
  description = "TXFENCE_STUCK_POLICY for ResubmitSweep (empty: *=noop)."
  type        = string
  default     = ""
}

variable "stuck_webhook_url" {
  description = "TXFENCE_STUCK_WEBHOOK_URL (empty: no webhook)."
  type        = string
  default     = ""
}

variable "stuck_webhook_secret" {
  description = "The webhook's HMAC secret, written into Secret Manager; null: add the secret's version yourself."
  type        = string
  sensitive   = true
  default     = null
}

variable "db_tier" {
  description = "Cloud SQL tier (Enterprise edition)."
  type        = string
  default     = "db-custom-2-7680"
}

variable "db_max_connections" {
  description = "PostgreSQL max_connections of each instance: the pools need 330 at the default maxima (under the connections alert's 80%, 400) and 430 while a rollout holds two revisions of the largest service."
  type        = number
  default     = 500
}

variable "db_instance_name" {
  description = "Cloud SQL instance of the one database (without shards). Changed only by the restore procedure (docs/runbook.md, \"Restore the database\"), never to rename."
  type        = string
  default     = "txfence"
}

variable "shards" {
  description = "Signers sharded over several Cloud SQL instances (terraform/variables.tf, shards; docs/deploy.md, \"Add a shard\"): null for one database."
  type = list(object({
    name              = string
    instance          = string
    tier              = optional(string)
    max_connections   = optional(number)
    disk_size_gb      = optional(number)
    availability_type = optional(string)
  }))
  default = null
}

variable "shard_map" {
  description = "TXFENCE_SHARD_MAP with two shards or more: vN:ADDRESS=SHARD,...[,*=SHARD]."
  type        = string
  default     = ""
}

variable "api_min_instances" {
  description = "API instances kept warm (2: one survives an instance or zone loss)."
  type        = number
  default     = 2
}

variable "max_instances" {
  description = "Maximum instances per function (keys api, submit, receipt, finality, outbox, resubmit); missing keys keep the module's defaults."
  type        = map(number)
  default     = {}
}

variable "api_domain" {
  description = "Domain of the API (load balancer, managed certificate, ID token audience)."
  type        = string
}

variable "api_invoker_members" {
  description = "Who may invoke the API (roles/run.invoker): [\"allUsers\"] to leave authentication to txfence (ID tokens, API keys) behind the load balancer, or the callers' identities. No default: the operator decides; [] keeps the API closed."
  type        = list(string)
}

variable "operator_members" {
  description = "Who operates txfence through its API by impersonating the operator service account (ID tokens with --include-email), e.g. [\"group:txfence-ops@example.com\"]; empty: the first admin's API key only."
  type        = list(string)
  default     = []
}

variable "api_allowed_cidrs" {
  description = "Source ranges the load balancer lets through (empty: all, rate-limited)."
  type        = list(string)
  default     = []
}

variable "api_rate_limit" {
  description = "Cloud Armor requests per interval_sec per client IP."
  type = object({
    count        = number
    interval_sec = number
  })
  default = {
    count        = 600
    interval_sec = 60
  }
}

variable "api_ssl_profile" {
  description = "MODERN or RESTRICTED (TLS 1.2+ either way)."
  type        = string
  default     = "MODERN"
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channel ids the alerts notify (the on-call's pager)."
  type        = list(string)
}

variable "workload_metric_alerts" {
  description = "Create the alerts that need txfence's own metrics to exist already (false for the first apply; docs/deploy.md turns it on after the first OutboxSweep ran)."
  type        = bool
  default     = false
}

variable "runbook_url" {
  description = "URL of docs/runbook.md that the alerts link to."
  type        = string
  default     = "https://github.com/txfence/txfence/blob/main/docs/runbook.md"
}

variable "alert_thresholds" {
  description = "Alert bounds (terraform/variables.tf, alert_thresholds); missing fields keep the module's defaults."
  type = object({
    fenced_writes         = optional(number, 5)
    pending_age_seconds   = optional(number, 900)
    stuck                 = optional(number, 1)
    api_5xx_ratio         = optional(number, 0.05)
    sql_cpu               = optional(number, 0.8)
    sql_connections_ratio = optional(number, 0.8)
    lease_takeovers       = optional(number, 10)
  })
  default = {}
}

variable "deployer_service_account" {
  description = "The Cloud Build trigger's service account (deploy rights); empty: grant them yourself."
  type        = string
  default     = ""
}
