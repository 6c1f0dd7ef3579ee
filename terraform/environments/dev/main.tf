# txfence, development environment: the shared module (../..) sized small.
# Nothing here is meant to survive a mistake: one zone, no point-in-time
# recovery, no deletion protection, every service scaled to zero when idle,
# the smallest Cloud SQL tier (shared core, no SLA). README "Environments".

terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 8.0"
    }
  }

  # Partial configuration: bucket and prefix come from backend.hcl at init
  # (terraform init -backend-config=backend.hcl), so this file names no
  # project's bucket.
  backend "gcs" {}
}

provider "google" {
  project = var.project
  region  = var.region

  default_labels = {
    app = "txfence"
    env = "dev"
  }
}

module "txfence" {
  source = "../.."

  project = var.project
  region  = var.region
  image   = var.image

  chains      = var.chains
  signers     = var.signers
  signer_keys = var.signer_keys

  finality_mode = var.finality_mode
  confirmations = var.confirmations
  log_level     = "debug"

  completion_lifecycle_events = var.completion_lifecycle_events

  # Smallest Cloud SQL: shared core, 0.6 GB, one zone, daily backups only.
  db_instance_name          = var.db_instance_name
  shards                    = var.shards
  shard_map                 = var.shard_map
  db_tier                   = "db-f1-micro"
  db_availability_type      = "ZONAL"
  db_disk_size_gb           = 10
  db_point_in_time_recovery = false
  db_backups_retained       = 3
  db_deletion_protection    = false
  db_max_connections        = 50

  # Everything scales to zero; few instances, small pools. Two instances of
  # each sweep: a run may outlast its minute (FinalitySweep always does,
  # by 5s), and the next one needs an instance of its own. Connections:
  # 2x4 + 2x2 + 2x2 + 2x2 + 2x2 + 2x2 = 28, + 10 reserved = 38 (under the
  # alert's 40), + 8 while a rollout holds two API revisions = 46 of 50.
  min_instances = { api = 0 }
  max_instances = { api = 2, submit = 2, receipt = 2, finality = 2, outbox = 2, resubmit = 2 }
  db_pool_sizes = { api = 4, submit = 2, receipt = 2, finality = 2, outbox = 2, resubmit = 2 }

  api_domain          = var.api_domain
  api_invoker_members = var.api_invoker_members
  api_allowed_cidrs   = var.api_allowed_cidrs
  operator_members    = var.operator_members
  # Without a load balancer, the run.app URL takes the invokers' and the
  # operators' IAM-authenticated calls.
  api_direct_ingress = var.api_domain == "" && (length(var.api_invoker_members) > 0 || length(var.operator_members) > 0)

  network_name    = "txfence-dev"
  run_subnet_cidr = "10.8.0.0/26"

  notification_channels  = var.notification_channels
  runbook_url            = var.runbook_url
  workload_metric_alerts = var.workload_metric_alerts

  deployer_service_account = var.deployer_service_account
}
