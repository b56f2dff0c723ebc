// kubecheck decodes Kubernetes manifests (YAML documents on stdin) strictly into the Go types of
// the Kubernetes API, the Gateway API and the Gateway API Inference Extension: a field the type
// does not have, a value of the wrong type, a duplicated field or a kind it does not know is an
// error, as the API server would refuse the object or silently drop the field. It is the offline
// stand-in for a server-side dry run, for tests/helm (no cluster, no schema download there).
//
//	helm template ... | kubecheck      exit 0: every document decoded; 1: the errors, one a line
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func main() {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme,
		rbacv1.AddToScheme, gatewayv1.Install, inferencev1.Install,
	} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, "kubecheck:", err)
			os.Exit(2)
		}
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	failed, count := 0, 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubecheck: reading stdin:", err)
			os.Exit(2)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		count++
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		name := "?"
		if gvk != nil {
			name = gvk.Kind
		}
		if meta, ok := obj.(interface{ GetName() string }); ok && obj != nil {
			name += "/" + meta.GetName()
		}
		if err != nil {
			failed++
			fmt.Printf("%s (document %d): %v\n", name, count, err)
		}
	}
	if failed > 0 {
		fmt.Printf("%d of %d documents failed\n", failed, count)
		os.Exit(1)
	}
	fmt.Printf("%d documents decoded strictly\n", count)
}

// stripComments drops the lines that are only a comment, so a document of comments counts as empty.
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			continue
		}
		out = append(out, line)
	}
	return bytes.Join(out, []byte("\n"))
}
