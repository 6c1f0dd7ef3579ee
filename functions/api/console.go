package api

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"time"
)

// consoleFiles is the operator console: a static page that calls this API
// with the operator's own credentials. The files hold no data, so they are
// served without authentication; every call they make is authenticated.
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP lets the page load nothing but its own files and call nothing
// but this origin: no external fonts, scripts or frames.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// serveConsole serves GET /console/ and its files.
func (h *Handler) serveConsole(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "" {
		name = "index.html"
	}
	b, err := fs.ReadFile(consoleFiles, path.Join("console", path.Clean("/" + name)[1:]))
	if err != nil {
		writeProblem(w, notFound("no console file "+name))
		return
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", consoleCSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-cache") // revalidated each time: a new image's page is seen at once
	// ServeContent picks the type from the name and answers ranges and
	// If-Modified-Since; the build time stands for the files' time.
	http.ServeContent(w, r, name, consoleBuilt, bytes.NewReader(b))
}

// consoleBuilt is when this process started: the console files cannot be
// newer.
var consoleBuilt = time.Now()
