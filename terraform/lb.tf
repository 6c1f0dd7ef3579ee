# External HTTPS load balancer in front of the API (global external
# Application Load Balancer): serverless NEG -> backend service (Cloud Armor)
# -> URL map -> HTTPS proxy with a Google-managed certificate -> forwarding
# rule on a reserved global IP. Plain HTTP on the same IP only redirects to
# HTTPS. The HTTPS proxy accepts TLS 1.2 and later only, with the MODERN (or
# RESTRICTED, var.api_ssl_profile) cipher profile.
#
# Created only when var.api_domain is set (a managed certificate needs a
# domain). What it lets through, in order:
#
#   1. the URL map routes only /v1/* and the operator console (/console,
#      /console/*: static files; its data calls are /v1/) to the Api; any
#      other path (/metrics,
#      /healthz, /Api/..., percent-encoded tricks such as /%6Detrics) is
#      redirected to /v1/openapi.json and never reaches the service;
#   2. Cloud Armor (txfence-api) refuses again, with 404, any path that is
#      neither /v1/ nor the console's, should the URL map ever change;
#   3. Cloud Armor allows the sources of var.api_allowed_cidrs (all when
#      empty), each client IP at most var.api_rate_limit requests per
#      interval (429 beyond); anything else 403;
#   4. Cloud Run admits the request if api_invoker_members allows it, and
#      txfence authenticates the caller (Google ID token or txfk_ API key).

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
  count = local.lb_enabled ? 1 : 0

  name        = "txfence-api"
  description = "txfence API: only /v1/ paths, the allowed sources (all when none are listed), a per-client-IP rate limit."
  type        = "CLOUD_ARMOR"

  # Only the API's own paths, whatever the URL map says: /metrics and
  # /healthz are for the platform, not for callers. request.path is the
  # path as sent, so an encoded form (/%6Detrics, /Api%2Fmetrics) does not
  # start with /v1/ either and is refused too.
  rule {
    action      = "deny(404)"
    priority    = 100
    description = "Only /v1/ and console paths reach the API"
    match {
      expr {
        expression = "!(request.path.startsWith('/v1/') || request.path.startsWith('/console/') || request.path == '/console')"
      }
    }
  }

  # The rate limit, per client IP, on the allowed sources: a basic match
  # holds at most 10 ranges, so one throttle rule per 10 (one rule for all
  # sources when none are listed). Under the limit a request is allowed;
  # over it, 429 until the rate drops.
  dynamic "rule" {
    for_each = length(var.api_allowed_cidrs) > 0 ? chunklist(var.api_allowed_cidrs, 10) : [["*"]]
    content {
      action      = "throttle"
      priority    = 1000 + rule.key
      description = length(var.api_allowed_cidrs) > 0 ? "Allowed callers (${rule.key + 1}), rate-limited" : "Everyone, rate-limited"
      match {
        versioned_expr = "SRC_IPS_V1"
        config {
          src_ip_ranges = rule.value
        }
      }
      rate_limit_options {
        conform_action = "allow"
        exceed_action  = "deny(429)"
        enforce_on_key = "IP"
        rate_limit_threshold {
          count        = var.api_rate_limit.count
          interval_sec = var.api_rate_limit.interval_sec
        }
      }
    }
  }

  # The mandatory default rule: sources not listed (only reached when
  # api_allowed_cidrs is set).
  rule {
    action      = length(var.api_allowed_cidrs) > 0 ? "deny(403)" : "allow"
    priority    = 2147483647
    description = "Default: sources not listed"
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

  security_policy = google_compute_security_policy.api[0].self_link

  log_config {
    enable      = true
    sample_rate = 1.0
  }
}

# Only /v1/* and the console go to the Api. Everything else, for every host, is sent to the
# API's description instead: nothing outside /v1/ (the Api's /metrics and
# /healthz among it) is ever forwarded.
resource "google_compute_url_map" "api" {
  count = local.lb_enabled ? 1 : 0

  name = "txfence-api"

  default_url_redirect {
    path_redirect          = "/v1/openapi.json"
    redirect_response_code = "FOUND"
    strip_query            = true
  }

  host_rule {
    hosts        = ["*"]
    path_matcher = "api"
  }

  path_matcher {
    name = "api"

    default_url_redirect {
      path_redirect          = "/v1/openapi.json"
      redirect_response_code = "FOUND"
      strip_query            = true
    }

    path_rule {
      paths   = ["/v1/*", "/console", "/console/*"]
      service = google_compute_backend_service.api[0].id
    }
  }

  # Checked by the API when the map is saved.
  test {
    host    = var.api_domain
    path    = "/v1/transactions"
    service = google_compute_backend_service.api[0].id
  }
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

# TLS 1.2 at least (the default policy still accepts TLS 1.0), with a
# profile that drops the legacy ciphers.
resource "google_compute_ssl_policy" "api" {
  count = local.lb_enabled ? 1 : 0

  name            = "txfence-api"
  description     = "txfence API: TLS 1.2 and later, ${var.api_ssl_profile} ciphers."
  min_tls_version = "TLS_1_2"
  profile         = var.api_ssl_profile
}

resource "google_compute_target_https_proxy" "api" {
  count = local.lb_enabled ? 1 : 0

  name             = "txfence-api"
  url_map          = google_compute_url_map.api[0].id
  ssl_certificates = [google_compute_managed_ssl_certificate.api[0].id]
  ssl_policy       = google_compute_ssl_policy.api[0].id
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
