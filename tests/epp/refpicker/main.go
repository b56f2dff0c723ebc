// refpicker runs the Gateway API Inference Extension's reference Endpoint Picker, the "lightweight EPP" (lwepp,
// sigs.k8s.io/gateway-api-inference-extension/pkg/lwepp at v1.6.0), outside Kubernetes, for Switchyard's EPP tests.
//
//	refpicker --listen 127.0.0.1:9002 --endpoints 127.0.0.2:8000,127.0.0.3:8000
//
// The picking and the ext_proc protocol are the library's own: its StreamingServer (pkg/lwepp/handlers) serves the
// Envoy ext_proc gRPC service, plaintext HTTP/2, on --listen. What upstream's cmd/lwepp gets from the Kubernetes API
// server (an InferencePool and its ready Pods) is fabricated here from --endpoints and handed to the library's own
// reconcilers (pkg/lwepp/controller) through an in-memory client, so the datastore is filled by the same code path as
// in a cluster: one Pod per endpoint, with the endpoint's IP as its pod IP, all selected by the pool; the pool's target
// ports are the endpoints' ports, and each Pod's active-ports annotation names its own port, so endpoints may differ
// in port.
//
// Once the datastore holds every endpoint and the port is bound, it prints "refpicker: listening on ADDR" on stdout
// (a readiness line for the test harness). Logs go to stderr; --v=1 shows each stream's messages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	v1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/lwepp/controller"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/lwepp/datastore"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/lwepp/handlers"
)

const (
	namespace = "default"
	poolName  = "switchyard-test-pool"
	// The annotation lwepp's datastore reads to restrict a Pod to some of the pool's target ports.
	activePortsAnnotation = "inference.networking.k8s.io/active-ports"
)

type endpoint struct {
	ip   string
	port int
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9002", "address the ext_proc gRPC server listens on (plaintext HTTP/2)")
	endpointsFlag := flag.String("endpoints", "", "comma-separated model server endpoints, ip:port (or ip, with --target-port)")
	targetPort := flag.Int("target-port", 0, "port of the endpoints given without one")
	verbosity := flag.Int("v", 0, "log verbosity (lwepp's levels): 0 = each stream and message, 1 = body chunks, 2 = pool and pods, 4 = each pick")
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(zapcore.Level(-*verbosity))))
	logger := ctrl.Log.WithName("refpicker")

	endpoints, err := parseEndpoints(*endpointsFlag, *targetPort)
	if err != nil {
		fmt.Fprintln(os.Stderr, "refpicker:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ds := datastore.NewDatastore(ctx)
	if err := fill(ctx, ds, endpoints); err != nil {
		logger.Error(err, "filling the datastore")
		os.Exit(1)
	}
	for _, ep := range ds.PodList(datastore.AllPodsPredicate) {
		logger.Info("endpoint in datastore", "pod", ep.PodName, "address", ep.Address, "port", ep.Port)
	}

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		logger.Error(err, "listen", "address", *listen)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	extProcPb.RegisterExternalProcessorServer(srv, handlers.NewStreamingServer(ds))
	// As upstream's runner does with --health-checking: the standard gRPC health service on the same port.
	hs := health.NewServer()
	healthgrpc.RegisterHealthServer(srv, hs)
	hs.SetServingStatus(extProcPb.ExternalProcessor_ServiceDesc.ServiceName, healthgrpc.HealthCheckResponse_SERVING)

	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	fmt.Printf("refpicker: listening on %s\n", lis.Addr())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		logger.Error(err, "serve")
		os.Exit(1)
	}
}

func parseEndpoints(s string, defaultPort int) ([]endpoint, error) {
	var out []endpoint
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		host, portStr, err := net.SplitHostPort(item)
		if err != nil {
			host, portStr = item, strconv.Itoa(defaultPort)
		}
		if net.ParseIP(host) == nil {
			return nil, fmt.Errorf("endpoint %q: not an IP address (lwepp routes to pod IPs)", item)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil || port < 1 || port > 65535 {
			return nil, fmt.Errorf("endpoint %q: no valid port (give ip:port, or --target-port)", item)
		}
		out = append(out, endpoint{host, port})
	}
	if len(out) == 0 {
		return nil, errors.New("--endpoints is empty")
	}
	return out, nil
}

// fill stores the pool and its pods in ds the way cmd/lwepp does in a cluster: the library's InferencePool
// reconciler sets the pool (listing the pool's ready pods through the client), then its Pod reconciler
// reconciles each pod. The client is controller-runtime's in-memory one, holding the fabricated objects.
func fill(ctx context.Context, ds datastore.Datastore, endpoints []endpoint) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1.Install(scheme); err != nil {
		return err
	}

	selector := map[v1.LabelKey]v1.LabelValue{"app": poolName}
	ports := map[int]bool{}
	var objects []runtime.Object
	var podNames []string
	for i, ep := range endpoints {
		ports[ep.port] = true
		name := fmt.Sprintf("pod-%d", i)
		podNames = append(podNames, name)
		objects = append(objects, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Namespace:   namespace,
				Labels:      map[string]string{"app": poolName},
				Annotations: map[string]string{activePortsAnnotation: strconv.Itoa(ep.port)},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:  "model-server",
				Image: "model-server",
				Ports: []corev1.ContainerPort{{ContainerPort: int32(ep.port)}},
			}}},
			Status: corev1.PodStatus{
				Phase:      corev1.PodRunning,
				PodIP:      ep.ip,
				PodIPs:     []corev1.PodIP{{IP: ep.ip}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			},
		})
	}
	var portList []int
	for p := range ports {
		portList = append(portList, p)
	}
	sort.Ints(portList)
	var targetPorts []v1.Port
	for _, p := range portList {
		targetPorts = append(targetPorts, v1.Port{Number: v1.PortNumber(p)})
	}
	objects = append(objects, &v1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: namespace},
		Spec: v1.InferencePoolSpec{
			Selector:    v1.LabelSelector{MatchLabels: selector},
			TargetPorts: targetPorts,
		},
	})

	reader := fake.NewClientBuilder().WithScheme(scheme).WithRuntimeObjects(objects...).Build()

	poolReconciler := &controller.InferencePoolReconciler{Reader: reader, Datastore: ds}
	if _, err := poolReconciler.Reconcile(ctx, ctrl.Request{
		NamespacedName: types.NamespacedName{Namespace: namespace, Name: poolName},
	}); err != nil {
		return fmt.Errorf("reconciling the pool: %w", err)
	}
	podReconciler := &controller.PodReconciler{Reader: reader, Datastore: ds}
	for _, name := range podNames {
		if _, err := podReconciler.Reconcile(ctx, ctrl.Request{
			NamespacedName: types.NamespacedName{Namespace: namespace, Name: name},
		}); err != nil {
			return fmt.Errorf("reconciling pod %s: %w", name, err)
		}
	}
	if got := len(ds.PodList(datastore.AllPodsPredicate)); got != len(endpoints) {
		return fmt.Errorf("datastore holds %d endpoints, want %d", got, len(endpoints))
	}
	return nil
}
