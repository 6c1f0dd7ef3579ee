# txfence, production environment: the shared module (../..) with high
# availability. Cloud SQL regional (synchronous standby in a second zone)
# with point-in-time recovery and deletion protection, API instances kept
# warm, the API behind the HTTPS load balancer with Cloud Armor. Who may call
# the API is left to the operator (api_invoker_members has no default).
# README "Environments".

terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 8.0"
    }
  }

  # Partial configuration: bucket and prefix come from backend.hcl at init
  # (terraform init -backend-config=backend.hcl).
  backend "gcs" {}
}

provider "google" {
  project = var.project
  region  = var.region

  default_labels = {
    app = "txfence"
    env = "prod"
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
  max_in_flight = var.max_in_flight

  completion_lifecycle_events = var.completion_lifecycle_events

  stuck_policy         = var.stuck_policy
  stuck_webhook_url    = var.stuck_webhook_url
  stuck_webhook_secret = var.stuck_webhook_secret

  # PostgreSQL is txfence's only authority: regional HA, 7 days of
  # point-in-time recovery, 14 daily backups, deletion protection in
  # terraform and in the Cloud SQL API.
  db_instance_name          = var.db_instance_name
  shards                    = var.shards
  shard_map                 = var.shard_map
  db_tier                   = var.db_tier
  db_max_connections        = var.db_max_connections
  db_availability_type      = "REGIONAL"
  db_point_in_time_recovery = true
  db_backups_retained       = 14
  db_deletion_protection    = true

  # The API stays warm (batching and create latency); the rest scales from
  # zero. Defaults of the module otherwise (320 connections at the maxima).
  min_instances = { api = var.api_min_instances }
  max_instances = var.max_instances

  run_deletion_protection = true

  api_domain          = var.api_domain
  api_invoker_members = var.api_invoker_members
  api_allowed_cidrs   = var.api_allowed_cidrs
  operator_members    = var.operator_members
  api_rate_limit      = var.api_rate_limit
  api_ssl_profile     = var.api_ssl_profile

  notification_channels  = var.notification_channels
  runbook_url            = var.runbook_url
  workload_metric_alerts = var.workload_metric_alerts
  alert_thresholds       = var.alert_thresholds

  deployer_service_account = var.deployer_service_account
}
