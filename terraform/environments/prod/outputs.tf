output "api_url" {
  description = "https://api_domain, or null without a load balancer."
  value       = module.txfence.api_url
}

output "api_ip" {
  description = "The load balancer's IP (point api_domain's A record here)."
  value       = module.txfence.api_ip
}

output "api_oidc_audience" {
  description = "Audience of the callers' Google ID tokens."
  value       = module.txfence.api_oidc_audience
}

output "service_urls" {
  description = "run.app URL of each service."
  value       = module.txfence.service_urls
}

output "sql_connection_name" {
  description = "project:region:instance of the Cloud SQL instance."
  value       = module.txfence.sql_connection_name
}

output "db_bootstrap_sql" {
  description = "SQL to run once as postgres before the first migration."
  value       = module.txfence.db_bootstrap_sql
}

output "signer_key_versions" {
  description = "Key versions created by signer_keys (derive their addresses with terraform/tools/kmsaddress)."
  value       = module.txfence.signer_key_versions
}

output "service_accounts" {
  description = "Runtime and pusher service accounts."
  value       = module.txfence.service_accounts
}

output "deadletter_subscription" {
  description = "Where dead letters wait for operators."
  value       = module.txfence.deadletter_subscription
}

output "dashboard" {
  description = "The Cloud Monitoring dashboard's id."
  value       = module.txfence.dashboard
}

output "db_connection_budget" {
  description = "Connections at the maximum instance counts (+10 reserved)."
  value       = module.txfence.db_connection_budget
}

output "sql_instances" {
  description = "Every Cloud SQL instance by shard (\"\" without shards): name, connection name, private IP."
  value       = module.txfence.sql_instances
}

output "migrate_job" {
  description = "The Cloud Run job that applies the migrations."
  value       = module.txfence.migrate_job
}

output "admin_job" {
  description = "The Cloud Run job that makes the first admin."
  value       = module.txfence.admin_job
}

output "first_admin" {
  description = "The first admin's principal and the secret its API key is written to."
  value       = module.txfence.first_admin
}

output "operator_service_account" {
  description = "The service account operators impersonate for ID tokens."
  value       = module.txfence.operator_service_account
}

output "db_users" {
  description = "IAM database user of each runtime service account (the restore runbook imports them)."
  value       = module.txfence.db_users
}
