// The tests' registry with the OCI 1.1 referrers API: go-containerregistry's pkg/registry (the registry of
// `crane registry serve`, in memory), as Debian's golang-github-google-go-containerregistry-dev 0.20.1 ships
// it, built by scripts/build-referrers-registry.sh.
//
//	registry -addr 127.0.0.1:PORT [-oci-subject]
//
// 0.20.1 answers a manifest pushed with a subject without the OCI-Subject header, and lists the config's
// media type where the manifest's artifactType belongs. -oci-subject adds the header, as later releases and
// the distribution spec 1.1 do: the two forms a client meets.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/registry"
)

const maxManifest = 4 << 20

type subjectHeader struct{ next http.Handler }

type answer struct {
	http.ResponseWriter
	subject string
}

func (a *answer) WriteHeader(code int) {
	if code == http.StatusCreated && a.subject != "" {
		a.Header().Set("OCI-Subject", a.subject)
	}
	a.ResponseWriter.WriteHeader(code)
}

func (h subjectHeader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/manifests/") {
		h.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxManifest+1))
	if err != nil || len(body) > maxManifest {
		http.Error(w, "manifest unreadable or too large", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var manifest struct {
		Subject *struct {
			Digest string `json:"digest"`
		} `json:"subject"`
	}
	subject := ""
	if json.Unmarshal(body, &manifest) == nil && manifest.Subject != nil {
		subject = manifest.Subject.Digest
	}
	h.next.ServeHTTP(&answer{w, subject}, r)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "address to listen on")
	ociSubject := flag.Bool("oci-subject", false, "answer a manifest with a subject with the OCI-Subject header")
	flag.Parse()
	var handler http.Handler = registry.New(registry.WithReferrersSupport(true),
		registry.Logger(log.New(io.Discard, "", 0)))
	if *ociSubject {
		handler = subjectHeader{handler}
	}
	log.Fatal(http.ListenAndServe(*addr, handler))
}
