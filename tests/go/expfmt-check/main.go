// Command expfmt-check reads a Prometheus scrape answer the way the Gateway
// API Inference Extension's endpoint picker (EPP) reads a model server's
// /metrics, and prints, as one JSON object, what it found for the metrics of
// the Model Server Protocol.
//
// EPP (v1.0.x: pkg/epp/backend/metrics/metrics.go, FetchMetrics) sends a GET
// with Go's HTTP client and no Accept header of its own (the transport adds
// `Accept-Encoding: gzip` and decompresses the answer), then parses the body
// with `expfmt.TextParser{}.TextToMetricFamilies`, whatever its
// Content-Type. This program does the same with the prometheus/common expfmt
// it is built against (Debian's golang-github-prometheus-common-dev, 0.39 on
// bookworm), built offline in GOPATH mode:
//
//	GO111MODULE=off GOPATH=$PWD/target/go-expfmt-check/gopath:/usr/share/gocode \
//	  go build -o target/go-expfmt-check/expfmt-check ./tests/go/expfmt-check
//
// Usage:
//
//	expfmt-check -url http://127.0.0.1:9089/metrics [-accept HEADER] [-metrics a,b,...]
//	expfmt-check -host 127.0.0.1:9089 -path /metrics/endpoint-picker -build join|url [...]
//	expfmt-check < body.txt
//
// With -host, the URL is built from -scheme (http), -host and -path the two
// ways EPP's releases build it: "join" as the legacy client does
// (pkg/epp/backend/metrics/metrics.go: the path appended to
// scheme://host as a string, so a `?` in it starts a query), "url" as the
// data layer does (v1.5.0 pkg/epp/framework/plugins/datalayer/source/http/
// datasource.go: `&url.URL{Scheme: ..., Host: ..., Path: path}`, so a `?` in
// the path is escaped to %3F and is part of the path). The URL used is
// reported as "source".
//
// Without -accept no Accept header is sent (as EPP does); an empty -accept= sends
// an empty one. An answer whose Content-Type is OpenMetrics
// (application/openmetrics-text) is not handed to the text parser: expfmt
// 0.39 has no OpenMetrics parser, and EPP's text parser is not meant for it.
// Such an answer is reported with "parsed": false; everything else is parsed,
// and a parse error, a failed request or a status other than 200 exits 1.
// Usage errors exit 2.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	neturl "net/url"
	"os"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// The metrics EPP reads (docs/proposals/003-model-server-protocol): queued and
// running requests, KV-cache usage (and the name EPP v1.0.x reads by
// default, vLLM's old one), LoRA adapters.
const defaultMetrics = "vllm:num_requests_waiting,vllm:num_requests_running," +
	"vllm:kv_cache_usage_perc,vllm:gpu_cache_usage_perc,vllm:lora_requests_info"

// Family is what the text parser made of one metric family.
type Family struct {
	// Type as client_model names it: GAUGE, COUNTER, UNTYPED, ...
	Type string `json:"type"`
	// Every label name any sample has, sorted.
	LabelNames []string `json:"label_names"`
	// Number of samples (series).
	Samples int `json:"samples"`
	// The value EPP takes for a plain metric: its getLatestMetric keeps the
	// sample with the newest timestamp, and with no timestamps in the body
	// that is the first sample.
	FirstValue float64 `json:"first_value"`
	// The value and labels of the sample EPP's getLatestMetric picks (the
	// llm-d router's pkg/epp/framework/plugins/datalayer/extractor/metrics/
	// spec.go): the newest timestamp, and without timestamps the first
	// sample.
	EppValue  float64           `json:"epp_value"`
	EppLabels map[string]string `json:"epp_labels"`
	// For vllm:lora_requests_info: the labels of the sample EPP's
	// getLatestLoraMetric picks (the largest value among the samples with
	// running_lora_adapters or waiting_lora_adapters set), if any, and its
	// value.
	LatestLoraLabels map[string]string `json:"latest_lora_labels,omitempty"`
	LatestLoraValue  float64           `json:"latest_lora_value,omitempty"`
}

// Report is the program's output.
type Report struct {
	Source          string             `json:"source"`
	Accept          *string            `json:"accept"`
	Status          int                `json:"status,omitempty"`
	ContentType     string             `json:"content_type"`
	ContentEncoding string             `json:"content_encoding_received"`
	Format          string             `json:"format"`
	Parsed          bool               `json:"parsed"`
	FamiliesParsed  int                `json:"families_parsed"`
	Metrics         map[string]*Family `json:"metrics"`
	Missing         []string           `json:"missing"`
	Note            string             `json:"note,omitempty"`
}

func main() {
	url := flag.String("url", "", "URL to GET (default: read the body from stdin)")
	accept := flag.String("accept", "", "Accept header to send (default: none, as EPP)")
	metrics := flag.String("metrics", defaultMetrics, "comma-separated metric names to report")
	timeout := flag.Duration("timeout", 10*time.Second, "request timeout")
	scheme := flag.String("scheme", "http", "with -host: the URL's scheme")
	host := flag.String("host", "", "build the URL from -scheme, -host and -path (instead of -url)")
	path := flag.String("path", "/metrics", "with -host: the metrics path, as EPP is given it")
	build := flag.String("build", "join", "with -host: how EPP builds the URL: join (legacy client) or url (url.URL{Path: ...})")
	flag.Parse()
	if *host != "" {
		if *url != "" {
			fail(2, "-url and -host exclude each other")
		}
		switch *build {
		case "join":
			joined := fmt.Sprintf("%s://%s%s", *scheme, *host, *path)
			url = &joined
		case "url":
			u := &neturl.URL{Scheme: *scheme, Host: *host, Path: *path}
			built := u.String()
			url = &built
		default:
			fail(2, "-build is join or url, not %q", *build)
		}
	}
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "expfmt-check: unexpected arguments:", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	acceptSet := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "accept" {
			acceptSet = true
		}
	})

	report := Report{Metrics: map[string]*Family{}, Missing: []string{}}
	var body io.Reader
	if *url == "" {
		report.Source = "stdin"
		body = os.Stdin
	} else {
		report.Source = *url
		req, err := http.NewRequest(http.MethodGet, *url, nil)
		if err != nil {
			fail(2, "bad -url: %v", err)
		}
		if acceptSet {
			req.Header.Set("Accept", *accept)
			report.Accept = accept
		}
		// A client like EPP's: Go's default transport (which asks for gzip
		// and decompresses transparently), a timeout as EPP's data layer has.
		client := &http.Client{Timeout: *timeout}
		resp, err := client.Do(req)
		if err != nil {
			fail(1, "GET %s: %v", *url, err)
		}
		defer resp.Body.Close()
		report.Status = resp.StatusCode
		report.ContentType = resp.Header.Get("Content-Type")
		if resp.Uncompressed {
			report.ContentEncoding = "gzip (decompressed by Go's transport)"
		} else {
			report.ContentEncoding = resp.Header.Get("Content-Encoding")
		}
		if resp.StatusCode != http.StatusOK {
			fail(1, "GET %s: status %d", *url, resp.StatusCode)
		}
		body = resp.Body
	}

	mediaType := ""
	if report.ContentType != "" {
		mt, _, err := mime.ParseMediaType(report.ContentType)
		if err != nil {
			fail(1, "unparsable Content-Type %q: %v", report.ContentType, err)
		}
		mediaType = mt
	}
	wanted := strings.Split(*metrics, ",")
	switch mediaType {
	case "application/openmetrics-text":
		// expfmt 0.39 writes OpenMetrics (MetricFamilyToOpenMetrics) but
		// cannot read it; EPP never asks for it.
		report.Format = "openmetrics"
		report.Note = "OpenMetrics answer: not parsed (expfmt's TextParser reads the Prometheus text format only)"
		if _, err := io.Copy(io.Discard, body); err != nil {
			fail(1, "reading the body: %v", err)
		}
		report.Missing = wanted
	case "", "text/plain":
		report.Format = "text"
		var parser expfmt.TextParser
		families, err := parser.TextToMetricFamilies(body)
		if err != nil {
			fail(1, "expfmt.TextParser: %v", err)
		}
		report.Parsed = true
		report.FamiliesParsed = len(families)
		for _, name := range wanted {
			family, ok := families[name]
			if !ok {
				report.Missing = append(report.Missing, name)
				continue
			}
			report.Metrics[name] = describe(family)
		}
	default:
		fail(1, "unexpected Content-Type %q", report.ContentType)
	}

	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(report); err != nil {
		fail(1, "writing the report: %v", err)
	}
}

func describe(family *dto.MetricFamily) *Family {
	names := map[string]bool{}
	for _, m := range family.GetMetric() {
		for _, l := range m.GetLabel() {
			names[l.GetName()] = true
		}
	}
	f := &Family{Type: family.GetType().String(), LabelNames: []string{}, Samples: len(family.GetMetric())}
	for name := range names {
		f.LabelNames = append(f.LabelNames, name)
	}
	sort.Strings(f.LabelNames)
	if f.Samples > 0 {
		f.FirstValue = value(family.GetMetric()[0])
		// getLatestMetric: a later sample replaces the kept one only with a
		// strictly newer timestamp.
		picked := family.GetMetric()[0]
		for _, m := range family.GetMetric()[1:] {
			if m.GetTimestampMs() > picked.GetTimestampMs() {
				picked = m
			}
		}
		f.EppValue = value(picked)
		f.EppLabels = labelMap(picked)
	}
	// EPP's getLatestLoraMetric, for any family: the sample with the largest
	// value among those naming running or waiting adapters.
	var latest *dto.Metric
	latestValue := 0.0
	for _, m := range family.GetMetric() {
		running, waiting := "", ""
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "running_lora_adapters":
				running = l.GetValue()
			case "waiting_lora_adapters":
				waiting = l.GetValue()
			}
		}
		if running == "" && waiting == "" {
			continue
		}
		if v := value(m); v > latestValue {
			latestValue = v
			latest = m
		}
	}
	if latest != nil {
		f.LatestLoraLabels = labelMap(latest)
		f.LatestLoraValue = latestValue
	}
	return f
}

// labelMap is a sample's labels by name.
func labelMap(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// value is what EPP reads of a sample: GetGauge().GetValue(), which is 0
// for a sample that is not a gauge.
func value(m *dto.Metric) float64 {
	return m.GetGauge().GetValue()
}

func fail(code int, format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "expfmt-check: "+format+"\n", args...)
	os.Exit(code)
}
