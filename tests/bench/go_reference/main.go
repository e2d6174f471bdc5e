// Command go_reference is the floor of any patching admission webhook, for tests/bench/bench_apiserver.py:
// Go's own HTTP/1.1 server and TLS (a goroutine per connection, as Kyverno and Gatekeeper serve), answering
// every AdmissionReview with a fixed JSON Patch read at start, or with none. What the API server spends on
// calling it and applying that patch is what any webhook answering the same patch costs at least.
//
//	go build -o go-reference main.go
//	./go-reference -addr :9444 -tls-cert tls.crt -tls-key tls.key -route /two=two.json -route /none=
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
)

// routes maps a URL path to the JSON Patch answered there (nil: allowed, no patch).
type routes map[string][]byte

func (r routes) String() string { return fmt.Sprintf("%d routes", len(r)) }

func (r routes) Set(value string) error {
	path, file, ok := strings.Cut(value, "=")
	if !ok || !strings.HasPrefix(path, "/") {
		return fmt.Errorf("want /PATH=PATCH_FILE or /PATH=, not %q", value)
	}
	if file == "" {
		r[path] = nil
		return nil
	}
	patch, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var operations []map[string]any
	if err := json.Unmarshal(patch, &operations); err != nil {
		return fmt.Errorf("%s is not a JSON Patch: %w", file, err)
	}
	r[path] = patch
	return nil
}

type admissionReview struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Request    *admissionRequest  `json:"request,omitempty"`
	Response   *admissionResponse `json:"response,omitempty"`
}

type admissionRequest struct {
	UID string `json:"uid"`
}

type admissionResponse struct {
	UID       string  `json:"uid"`
	Allowed   bool    `json:"allowed"`
	PatchType *string `json:"patchType,omitempty"`
	Patch     []byte  `json:"patch,omitempty"` // encoding/json writes []byte as base64, as the API wants
}

func answer(patch []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		var review admissionReview
		if err := json.NewDecoder(io.LimitReader(req.Body, 8<<20)).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "the body is not an AdmissionReview", http.StatusBadRequest)
			return
		}
		response := &admissionResponse{UID: review.Request.UID, Allowed: true}
		if patch != nil {
			patchType := "JSONPatch"
			response.PatchType, response.Patch = &patchType, patch
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(admissionReview{APIVersion: review.APIVersion, Kind: review.Kind, Response: response}); err != nil {
			log.Printf("answering %s: %v", review.Request.UID, err)
		}
	}
}

func main() {
	answers := routes{}
	addr := flag.String("addr", ":9444", "host:port to listen on")
	cert := flag.String("tls-cert", "", "the serving certificate (PEM)")
	key := flag.String("tls-key", "", "its key (PEM)")
	flag.Var(answers, "route", "/PATH=PATCH_FILE (answer every review with that JSON Patch) or /PATH= (no patch); repeatable")
	flag.Parse()
	if len(answers) == 0 || *cert == "" || *key == "" {
		flag.Usage()
		os.Exit(2)
	}
	mux := http.NewServeMux()
	for path, patch := range answers {
		mux.HandleFunc(path, answer(patch))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	server := &http.Server{
		Addr:         *addr,
		Handler:      mux,
		TLSConfig:    &tls.Config{MinVersion: tls.VersionTLS12},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1, as Placer serves
	}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
