// Package telemetrytest serves in-process fakes of the two Google services
// txfence's telemetry writes to, Cloud Monitoring's MetricService
// (metric descriptors and time series) and Cloud Trace's TraceService
// (spans), on a loopback gRPC listener, and keeps what they receive for
// tests to read. Google's services cannot run here; everything in front of
// them (the OpenTelemetry SDK, Google's exporters, their gRPC clients) is
// the real thing.
package telemetrytest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/monitoring/apiv3/v2/monitoringpb"
	"cloud.google.com/go/trace/apiv2/tracepb"
	"google.golang.org/api/option"
	metricpb "google.golang.org/genproto/googleapis/api/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Server is the fake. Like the real services, it refuses requests for
// another project and malformed time series (InvalidArgument), so a
// client that writes them fails.
type Server struct {
	project string
	addr    string

	monitoringpb.UnimplementedMetricServiceServer
	tracepb.UnimplementedTraceServiceServer

	mu          sync.Mutex
	descriptors map[string]*metricpb.MetricDescriptor // by type
	series      []*monitoringpb.TimeSeries
	spans       []*tracepb.Span
}

// Start serves the fake for project until the test ends.
func Start(t testing.TB, project string) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("telemetrytest: listen: %v", err)
	}
	s := &Server{project: project, addr: lis.Addr().String(), descriptors: map[string]*metricpb.MetricDescriptor{}}
	g := grpc.NewServer()
	monitoringpb.RegisterMetricServiceServer(g, s)
	tracepb.RegisterTraceServiceServer(g, s)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return s
}

// ClientOptions point Google API clients at the fake: its address, no
// credentials, no TLS.
func (s *Server) ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(s.addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

func (s *Server) checkProject(name string) error {
	if name != "projects/"+s.project {
		return status.Errorf(codes.InvalidArgument, "name %q: want projects/%s", name, s.project)
	}
	return nil
}

// GetMetricDescriptor answers NotFound for a type never created.
func (s *Server) GetMetricDescriptor(_ context.Context, r *monitoringpb.GetMetricDescriptorRequest) (*metricpb.MetricDescriptor, error) {
	typ, ok := strings.CutPrefix(r.GetName(), "projects/"+s.project+"/metricDescriptors/")
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "name %q", r.GetName())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if md, ok := s.descriptors[typ]; ok {
		return md, nil
	}
	return nil, status.Errorf(codes.NotFound, "no metric descriptor %s", typ)
}

// CreateMetricDescriptor keeps the descriptor.
func (s *Server) CreateMetricDescriptor(_ context.Context, r *monitoringpb.CreateMetricDescriptorRequest) (*metricpb.MetricDescriptor, error) {
	if err := s.checkProject(r.GetName()); err != nil {
		return nil, err
	}
	md := r.GetMetricDescriptor()
	if md.GetType() == "" || md.GetMetricKind() == metricpb.MetricDescriptor_METRIC_KIND_UNSPECIFIED ||
		md.GetValueType() == metricpb.MetricDescriptor_VALUE_TYPE_UNSPECIFIED {
		return nil, status.Errorf(codes.InvalidArgument, "metric descriptor %q needs a type, a kind and a value type", md.GetType())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.descriptors[md.GetType()] = md
	return md, nil
}

// CreateTimeSeries keeps the series. Each must have one point, a metric
// type, a monitored resource and, if cumulative, a start before its end.
func (s *Server) CreateTimeSeries(_ context.Context, r *monitoringpb.CreateTimeSeriesRequest) (*emptypb.Empty, error) {
	if err := s.checkProject(r.GetName()); err != nil {
		return nil, err
	}
	if n := len(r.GetTimeSeries()); n == 0 || n > 200 {
		return nil, status.Errorf(codes.InvalidArgument, "%d time series: want 1 to 200", n)
	}
	for _, ts := range r.GetTimeSeries() {
		if err := checkSeries(ts); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.series = append(s.series, r.GetTimeSeries()...)
	return &emptypb.Empty{}, nil
}

func checkSeries(ts *monitoringpb.TimeSeries) error {
	typ := ts.GetMetric().GetType()
	switch {
	case typ == "":
		return fmt.Errorf("a time series needs a metric type")
	case ts.GetResource().GetType() == "":
		return fmt.Errorf("%s: a time series needs a monitored resource", typ)
	case len(ts.GetPoints()) != 1:
		return fmt.Errorf("%s: %d points, want exactly 1", typ, len(ts.GetPoints()))
	}
	iv := ts.GetPoints()[0].GetInterval()
	if iv.GetEndTime() == nil {
		return fmt.Errorf("%s: a point needs an end time", typ)
	}
	if ts.GetMetricKind() == metricpb.MetricDescriptor_CUMULATIVE &&
		(iv.GetStartTime() == nil || !iv.GetStartTime().AsTime().Before(iv.GetEndTime().AsTime())) {
		return fmt.Errorf("%s: a cumulative point needs a start before its end", typ)
	}
	return nil
}

// BatchWriteSpans keeps the spans.
func (s *Server) BatchWriteSpans(_ context.Context, r *tracepb.BatchWriteSpansRequest) (*emptypb.Empty, error) {
	if err := s.checkProject(r.GetName()); err != nil {
		return nil, err
	}
	for _, sp := range r.GetSpans() {
		if !strings.HasPrefix(sp.GetName(), r.GetName()+"/traces/") {
			return nil, status.Errorf(codes.InvalidArgument, "span name %q is not under %s", sp.GetName(), r.GetName())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, r.GetSpans()...)
	return &emptypb.Empty{}, nil
}

// Descriptors are the metric descriptors created, by metric type.
func (s *Server) Descriptors() map[string]*metricpb.MetricDescriptor {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*metricpb.MetricDescriptor, len(s.descriptors))
	for k, v := range s.descriptors {
		out[k] = v
	}
	return out
}

// TimeSeries are the time series written, in order.
func (s *Server) TimeSeries() []*monitoringpb.TimeSeries {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*monitoringpb.TimeSeries(nil), s.series...)
}

// Spans are the spans written, in order.
func (s *Server) Spans() []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*tracepb.Span(nil), s.spans...)
}
