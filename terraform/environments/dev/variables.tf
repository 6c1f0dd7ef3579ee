# Inputs of the dev environment. Sizing is fixed in main.tf; these are the
# things that differ per project. Values go in terraform.tfvars (copy
# terraform.tfvars.example; kept out of version control).

variable "project" {
  description = "Google Cloud project id of the dev environment."
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
  description = "chain id => RPC URLs, written into Secret Manager (txfence-chains). null: add the secret's versions yourself (terraform/README.md, Secrets). Testnets only in dev."
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
  default     = 1
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
  description = "Blocks required in confirmations mode (few on a testnet)."
  type        = number
  default     = 3
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

variable "api_domain" {
  description = "Domain of the API's load balancer; empty: no load balancer (call the API from inside the project, or at its run.app URL with api_invoker_members)."
  type        = string
  default     = ""
}

variable "api_invoker_members" {
  description = "Who may invoke the API (roles/run.invoker), e.g. [\"user:you@example.com\"]; empty: nobody. Without api_domain, a non-empty list also opens the run.app URL to those (IAM-authenticated) callers."
  type        = list(string)
  default     = []
}

variable "operator_members" {
  description = "Who operates txfence through its API by impersonating the operator service account (ID tokens with --include-email), e.g. [\"group:txfence-ops@example.com\"]; empty: the first admin's API key only."
  type        = list(string)
  default     = []
}

variable "api_allowed_cidrs" {
  description = "Source ranges the load balancer lets through (empty: all)."
  type        = list(string)
  default     = []
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channel ids for the alerts (empty: incidents in the console only)."
  type        = list(string)
  default     = []
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

variable "deployer_service_account" {
  description = "The Cloud Build trigger's service account (deploy rights); empty: grant them yourself."
  type        = string
  default     = ""
}
