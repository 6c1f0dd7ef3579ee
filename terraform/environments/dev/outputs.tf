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
