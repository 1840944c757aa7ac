// The floor for benchmarks/bench_webhook.py: the least a compiled webhook can do.
//
// A net/http TLS server with the project's three admission paths. Each decodes the
// AdmissionReview (object included) and answers allowed:true. The Pod route also
// lists the namespace's CacheBackends once per request from the API server, over a
// pooled keep-alive client with a client certificate, and decodes the list: the same
// live read the project does. Standard library only, so `go build` needs no network.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"time"
)

type admissionRequest struct {
	UID       string         `json:"uid"`
	Operation string         `json:"operation"`
	Namespace string         `json:"namespace"`
	Object    map[string]any `json:"object"`
	OldObject map[string]any `json:"oldObject"`
}

type admissionReview struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Request    *admissionRequest `json:"request"`
}

type admissionResponse struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

type reviewResponse struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Response   admissionResponse `json:"response"`
}

type cacheBackendList struct {
	Items []map[string]any `json:"items"`
}

func decode(w http.ResponseWriter, r *http.Request) *admissionRequest {
	var review admissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 3<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return nil
	}
	return review.Request
}

func answer(w http.ResponseWriter, uid string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reviewResponse{
		APIVersion: "admission.k8s.io/v1",
		Kind:       "AdmissionReview",
		Response:   admissionResponse{UID: uid, Allowed: true},
	})
}

func apiClient(ca, cert, key string) *http.Client {
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("reading CA %s: %v", ca, err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		log.Fatalf("reading client certificate: %v", err)
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	return &http.Client{Transport: transport, Timeout: 5 * time.Second}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9443", "listen address")
	certFile := flag.String("tls-cert-file", "", "serving certificate")
	keyFile := flag.String("tls-key-file", "", "serving key")
	server := flag.String("apiserver", "", "API server URL (for the Pod route's CacheBackend list)")
	ca := flag.String("apiserver-ca", "", "API server CA")
	clientCert := flag.String("client-cert", "", "client certificate for the API server")
	clientKey := flag.String("client-key", "", "client key for the API server")
	flag.Parse()

	api := apiClient(*ca, *clientCert, *clientKey)
	mux := http.NewServeMux()
	allow := func(w http.ResponseWriter, r *http.Request) {
		if req := decode(w, r); req != nil {
			answer(w, req.UID)
		}
	}
	mux.HandleFunc("POST /validate-inferencecache-io-v1alpha1-cachebackend", allow)
	mux.HandleFunc("POST /mutate-inferencecache-io-v1alpha1-cachebackend", allow)
	mux.HandleFunc("POST /mutate--v1-pod", func(w http.ResponseWriter, r *http.Request) {
		req := decode(w, r)
		if req == nil {
			return
		}
		path := fmt.Sprintf("%s/apis/inferencecache.io/v1alpha1/namespaces/%s/cachebackends",
			*server, url.PathEscape(req.Namespace))
		resp, err := api.Get(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var list cacheBackendList
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 {
			http.Error(w, fmt.Sprintf("list: %d %v", resp.StatusCode, err), http.StatusBadGateway)
			return
		}
		answer(w, req.UID)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServeTLS(*certFile, *keyFile))
}
