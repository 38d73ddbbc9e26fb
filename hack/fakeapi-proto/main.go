// Command fakeapi-proto writes the Go-JSON facts fakeapi needs to turn Kubernetes protobuf into
// the JSON kube-apiserver would store: for every message, each field's JSON name and whether Go
// omits it when empty or zero; which kind (group/version/Kind) is which message; which messages stand for
// a Go slice (their JSON is the `items` array); which have a hand-written JSON form.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// field is one protobuf field of a Go struct, as encoding/json writes it.
type field struct {
	JSON      string `json:"json"`
	OmitEmpty bool   `json:"omitempty,omitempty"`
	OmitZero  bool   `json:"omitzero,omitempty"`
	Pointer   bool   `json:"pointer,omitempty"`
	Inline    bool   `json:"inline,omitempty"`
}

type output struct {
	Source   string                       `json:"source"`
	Kinds    map[string]string            `json:"kinds"`
	Messages map[string]map[string]field `json:"messages"`
	Wrappers []string                     `json:"wrappers"`
	Custom   []string                     `json:"custom"`
}

var (
	marshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	out       = output{
		Source:   os.Args[1],
		Kinds:    map[string]string{},
		Messages: map[string]map[string]field{},
	}
	wrappers = map[string]bool{}
	custom   = map[string]bool{}
)

// protoName is the protobuf message go-to-protobuf generates for a Go type.
func protoName(t reflect.Type) string {
	pkg := strings.NewReplacer("/", ".", "-", "_").Replace(t.PkgPath())
	return pkg + "." + t.Name()
}

func isKube(t reflect.Type) bool { return strings.HasPrefix(t.PkgPath(), "k8s.io/") }

func walk(t reflect.Type) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		if t.Kind() == reflect.Slice && t.Name() != "" && isKube(t) && t.Elem().Kind() != reflect.Uint8 {
			wrappers[protoName(t)] = true
		}
		if t.Kind() == reflect.Map {
			walk(t.Elem())
			return
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || !isKube(t) {
		return
	}
	name := protoName(t)
	if _, seen := out.Messages[name]; seen || custom[name] {
		return
	}
	if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) {
		custom[name] = true
		return
	}
	fields := map[string]field{}
	out.Messages[name] = fields
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("protobuf")
		if !ok {
			continue
		}
		parts := strings.Split(tag, ",")
		jsonTag := strings.Split(f.Tag.Get("json"), ",")
		fl := field{JSON: jsonTag[0], Pointer: f.Type.Kind() == reflect.Pointer}
		for _, opt := range jsonTag[1:] {
			fl.OmitEmpty = fl.OmitEmpty || opt == "omitempty"
			fl.OmitZero = fl.OmitZero || opt == "omitzero"
			fl.Inline = fl.Inline || opt == "inline"
		}
		if fl.JSON == "" && !fl.Inline {
			fl.JSON = f.Name
		}
		fields[parts[1]] = fl
		walk(f.Type)
	}
}

func main() {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, coordinationv1.AddToScheme, eventsv1.AddToScheme,
		rbacv1.AddToScheme, authenticationv1.AddToScheme, apiextensionsv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	for gvk, t := range scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		out.Kinds[gvk.GroupVersion().String()+"/"+gvk.Kind] = protoName(t)
		walk(t)
	}
	for w := range wrappers {
		out.Wrappers = append(out.Wrappers, w)
	}
	for c := range custom {
		out.Custom = append(out.Custom, c)
	}
	sort.Strings(out.Wrappers)
	sort.Strings(out.Custom)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
