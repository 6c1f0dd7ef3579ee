output "api_url" {
  description = "Public base URL of the API (through the load balancer), or null without api_domain. Its routes are under /v1."
  value       = local.lb_enabled ? "https://${var.api_domain}" : null
}

output "api_ip" {
  description = "Global IP of the load balancer: point an A record for api_domain at it. Null without api_domain."
  value       = one(google_compute_global_address.api[*].address)
}

output "api_oidc_audience" {
  description = "The audience the API's callers mint their Google ID tokens for (TXFENCE_OIDC_AUDIENCE): https://api_domain, or the Api's run.app URL without a load balancer."
  value       = local.api_url
}

output "secrets" {
  description = "Secret Manager secret ids: chains (TXFENCE_CHAINS) and, with stuck_webhook_url, stuck_webhook (TXFENCE_STUCK_WEBHOOK_SECRET). Add versions with gcloud secrets versions add when terraform does not write them (README, Secrets)."
  value       = { for k, s in google_secret_manager_secret.this : k => s.secret_id }
}

output "service_urls" {
  description = "run.app URL of each Cloud Run service. None accepts traffic from the internet: the API's ingress is internal + load balancer (unless api_direct_ingress), the others' internal (Pub/Sub push and Cloud Scheduler of the project)."
  value       = { for k, s in google_cloud_run_v2_service.fn : k => s.uri }
}

output "service_names" {
  description = "Cloud Run service name of each function (cloudbuild.yaml deploys these)."
  value       = { for k, s in google_cloud_run_v2_service.fn : k => s.name }
}

output "topics" {
  description = "Pub/Sub topic ids. Subscribe to completion for outcomes (with enable_message_ordering for per-signer order)."
  value       = { for k, t in google_pubsub_topic.this : k => t.name }
}

output "deadletter_subscription" {
  description = "Pull subscription holding prompts that exhausted their deliveries."
  value       = google_pubsub_subscription.deadletter_pull.name
}

output "sql_connection_name" {
  description = "Connection name (project:region:instance) of the Cloud SQL instance of the one database, or of the home shard: TXFENCE_CLOUDSQL_INSTANCE, or the first of TXFENCE_DATABASES."
  value       = google_sql_database_instance.db["main"].connection_name
}

output "sql_instances" {
  description = "Every Cloud SQL instance by shard name (\"\" for the one database without shards): its name, connection name and private IP."
  value = {
    for k, d in local.db_instances : d.shard => {
      name            = google_sql_database_instance.db[k].name
      connection_name = google_sql_database_instance.db[k].connection_name
      private_ip      = google_sql_database_instance.db[k].private_ip_address
    }
  }
}

output "db_users" {
  description = "IAM database user of each runtime service account."
  value       = local.db_users
}

output "db_bootstrap_sql" {
  description = "SQL to run once as user postgres in database txfence before the first migration (README, First deployment)."
  value       = local.db_bootstrap_sql
}

output "migrate_job" {
  description = "Name of the Cloud Run job that applies the migrations."
  value       = google_cloud_run_v2_job.migrate.name
}

output "admin_job" {
  description = "Name of the Cloud Run job that makes the first admin (functions/admin bootstrap)."
  value       = google_cloud_run_v2_job.admin.name
}

output "first_admin" {
  description = "The first admin's principal and the secret the admin job writes its API key to (read it with gcloud secrets versions access latest --secret=SECRET)."
  value = {
    principal = local.first_admin_principal
    secret    = google_secret_manager_secret.first_admin.secret_id
  }
}

output "operator_service_account" {
  description = "The service account operators impersonate for ID tokens (operator_members): gcloud auth print-identity-token --impersonate-service-account=EMAIL --audiences=API_OIDC_AUDIENCE --include-email."
  value       = google_service_account.operator.email
}

output "service_accounts" {
  description = "Email of each runtime service account, and of the pusher (Pub/Sub push and Cloud Scheduler caller identity)."
  value = merge(
    { for k, sa in google_service_account.runtime : k => sa.email },
    {
      pusher   = google_service_account.pusher.email
      operator = google_service_account.operator.email
    },
  )
}

output "signer_key_versions" {
  description = "Full names of the key versions created by signer_keys (version 1 of each key). Derive their addresses with terraform/tools/kmsaddress and add them to signers."
  value       = [for id in local.created_key_ids : "${id}/cryptoKeyVersions/1"]
}

output "signer_public_keys" {
  description = "PEM public key of each created key version, in the order of signer_key_versions."
  value       = [for v in data.google_kms_crypto_key_version.signer : v.public_key[0].pem]
}

output "signers_configured" {
  description = "TXFENCE_SIGNERS as given to the functions other than Submit (addresses only)."
  value       = local.signers_addresses_env
}

output "network" {
  description = "The VPC and subnet of the services' Direct VPC egress, and Cloud SQL's private IP."
  value = {
    network        = google_compute_network.txfence.name
    subnetwork     = google_compute_subnetwork.run.name
    sql_private_ip = google_sql_database_instance.db["main"].private_ip_address
  }
}

output "db_connection_budget" {
  description = "Connections each instance (every shard) may get: the functions' pools at their maximum instance counts, a rollout's second revision of the largest, and 10 for the jobs and operators; at most its max_connections (checked at plan)."
  value       = local.db_connection_budget
}

output "dashboard" {
  description = "The Cloud Monitoring dashboard's id (projects/NUMBER/dashboards/ID); open it at https://console.cloud.google.com/monitoring/dashboards/builder/ID."
  value       = google_monitoring_dashboard.txfence.id
}

output "alert_policies" {
  description = "Alert policy names by alert (every policy of monitoring.tf; sweep_* per sweep, metrics_absent with workload_metric_alerts), each linking to its docs/runbook.md section."
  value       = { for k, p in local.alert_policies : k => p.name }
}
