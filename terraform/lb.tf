# External HTTPS load balancer in front of the API (global external
# Application Load Balancer): serverless NEG -> backend service -> URL map ->
# HTTPS proxy with a Google-managed certificate -> forwarding rule on a
# reserved global IP. Plain HTTP on the same IP only redirects to HTTPS.
#
# Created only when var.api_domain is set (a managed certificate needs a
# domain). Who may call the API is the team's choice: this module offers an
# optional Cloud Armor source-CIDR allowlist (var.api_allowed_cidrs);
# Identity-Aware Proxy on the backend service, or IAM-authenticated callers
# (var.api_invoker_members without allUsers), are the alternatives.
#
# Note that everything the Api serves is reachable through it, including
# /metrics (Prometheus text) and /healthz.

resource "google_compute_global_address" "api" {
  count = local.lb_enabled ? 1 : 0

  name = "txfence-api"

  depends_on = [google_project_service.apis]
}

resource "google_compute_region_network_endpoint_group" "api" {
  count = local.lb_enabled ? 1 : 0

  name                  = "txfence-api"
  region                = var.region
  network_endpoint_type = "SERVERLESS"

  cloud_run {
    service = google_cloud_run_v2_service.fn["api"].name
  }
}

resource "google_compute_security_policy" "api" {
  count = local.lb_enabled && length(var.api_allowed_cidrs) > 0 ? 1 : 0

  name        = "txfence-api"
  description = "Allow the txfence API only from var.api_allowed_cidrs."

  # A basic rule matches at most 10 ranges: one allow rule per 10.
  dynamic "rule" {
    for_each = chunklist(var.api_allowed_cidrs, 10)
    content {
      action      = "allow"
      priority    = 1000 + rule.key
      description = "txfence API callers (${rule.key + 1})"
      match {
        versioned_expr = "SRC_IPS_V1"
        config {
          src_ip_ranges = rule.value
        }
      }
    }
  }

  # The mandatory default rule: deny everyone else.
  rule {
    action      = "deny(403)"
    priority    = 2147483647
    description = "Default: deny"
    match {
      versioned_expr = "SRC_IPS_V1"
      config {
        src_ip_ranges = ["*"]
      }
    }
  }
}

resource "google_compute_backend_service" "api" {
  count = local.lb_enabled ? 1 : 0

  name                  = "txfence-api"
  load_balancing_scheme = "EXTERNAL_MANAGED"
  protocol              = "HTTPS"
  # No health check, port or timeout: serverless NEG backends take none (the
  # Cloud Run request timeout applies).

  backend {
    group = google_compute_region_network_endpoint_group.api[0].id
  }

  security_policy = one(google_compute_security_policy.api[*].self_link)

  log_config {
    enable      = true
    sample_rate = 1.0
  }
}

resource "google_compute_url_map" "api" {
  count = local.lb_enabled ? 1 : 0

  name            = "txfence-api"
  default_service = google_compute_backend_service.api[0].id
}

resource "google_compute_managed_ssl_certificate" "api" {
  count = local.lb_enabled ? 1 : 0

  # The name changes with the domain, so that create_before_destroy below can
  # create the replacement next to the certificate still in use.
  name = "txfence-api-${substr(sha1(var.api_domain), 0, 8)}"

  managed {
    domains = [var.api_domain]
  }

  # A certificate in use cannot be deleted: on a domain change create the new
  # one first, switch the proxy, then delete the old one.
  lifecycle {
    create_before_destroy = true
  }
}

resource "google_compute_target_https_proxy" "api" {
  count = local.lb_enabled ? 1 : 0

  name             = "txfence-api"
  url_map          = google_compute_url_map.api[0].id
  ssl_certificates = [google_compute_managed_ssl_certificate.api[0].id]
}

resource "google_compute_global_forwarding_rule" "api_https" {
  count = local.lb_enabled ? 1 : 0

  name                  = "txfence-api-https"
  load_balancing_scheme = "EXTERNAL_MANAGED"
  ip_protocol           = "TCP"
  ip_address            = google_compute_global_address.api[0].address
  port_range            = "443"
  target                = google_compute_target_https_proxy.api[0].id
}

# HTTP -> HTTPS redirect on the same address.
resource "google_compute_url_map" "api_redirect" {
  count = local.lb_enabled ? 1 : 0

  name = "txfence-api-redirect"

  default_url_redirect {
    https_redirect         = true
    redirect_response_code = "MOVED_PERMANENTLY_DEFAULT"
    strip_query            = false
  }
}

resource "google_compute_target_http_proxy" "api_redirect" {
  count = local.lb_enabled ? 1 : 0

  name    = "txfence-api-redirect"
  url_map = google_compute_url_map.api_redirect[0].id
}

resource "google_compute_global_forwarding_rule" "api_http" {
  count = local.lb_enabled ? 1 : 0

  name                  = "txfence-api-http"
  load_balancing_scheme = "EXTERNAL_MANAGED"
  ip_protocol           = "TCP"
  ip_address            = google_compute_global_address.api[0].address
  port_range            = "80"
  target                = google_compute_target_http_proxy.api_redirect[0].id
}
