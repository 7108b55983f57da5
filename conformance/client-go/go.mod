// client-go from Debian 13's packages (debian.lock), not from the Go module
// proxy, which these machines cannot reach: every module the program builds
// with is replaced by its directory in those packages, which build.sh
// unpacks under target/conformance/client-go-deps. The versions required
// below are the ones client-go v0.32.3's own go.mod names; the code built is
// Debian's (versions in debian.lock). stubs/ holds empty go.mod files for
// modules that only appear in the requirement graph (named by the go.mod
// files of gogo/protobuf and x/net) and contribute no package. With every
// module replaced by a directory, there is nothing for go.sum to record:
// debian.lock pins each package by SHA-256 instead.
module kubefan/conformance/clientgo

go 1.23.0

require (
	k8s.io/apimachinery v0.32.3
	k8s.io/client-go v0.32.3
)

require (
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/emicklei/go-restful/v3 v3.11.0 // indirect
	github.com/evanphx/json-patch/v5 v5.0.0-00010101000000-000000000000 // indirect
	github.com/fxamacker/cbor/v2 v2.7.0 // indirect
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/go-openapi/jsonpointer v0.21.0 // indirect
	github.com/go-openapi/jsonreference v0.20.2 // indirect
	github.com/go-openapi/swag v0.23.1 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/gnostic-models v0.6.9 // indirect
	github.com/google/go-cmp v0.6.0 // indirect
	github.com/google/gofuzz v1.2.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/mailru/easyjson v0.9.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/spf13/pflag v1.0.5 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/net v0.30.0 // indirect
	golang.org/x/oauth2 v0.23.0 // indirect
	golang.org/x/sys v0.26.0 // indirect
	golang.org/x/term v0.25.0 // indirect
	golang.org/x/text v0.19.0 // indirect
	golang.org/x/time v0.7.0 // indirect
	google.golang.org/protobuf v1.35.1 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/api v0.32.3 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/kube-openapi v0.0.0-20241105132330-32ad38e42d3f // indirect
	k8s.io/utils v0.0.0-20241104100929-3ea5e8cea738 // indirect
	sigs.k8s.io/json v0.0.0-20241010143419-9aa6b5e7a4b3 // indirect
	sigs.k8s.io/structured-merge-diff/v4 v4.4.2 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
)

replace (
	github.com/davecgh/go-spew => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/davecgh/go-spew
	github.com/emicklei/go-restful/v3 => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/emicklei/go-restful
	github.com/evanphx/json-patch/v5 => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/evanphx/json-patch/v5
	github.com/fxamacker/cbor/v2 => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/fxamacker/cbor
	github.com/go-logr/logr => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/go-logr/logr
	github.com/go-openapi/jsonpointer => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/go-openapi/jsonpointer
	github.com/go-openapi/jsonreference => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/go-openapi/jsonreference
	github.com/go-openapi/swag => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/go-openapi/swag
	github.com/gogo/protobuf => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/gogo/protobuf
	github.com/golang/protobuf => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/golang/protobuf
	github.com/google/gnostic-models => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/google/gnostic-models
	github.com/google/go-cmp => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/google/go-cmp
	github.com/google/gofuzz => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/google/gofuzz
	github.com/google/uuid => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/google/uuid
	github.com/josharian/intern => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/josharian/intern
	github.com/json-iterator/go => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/json-iterator/go
	github.com/kisielk/errcheck => ./stubs/github.com/kisielk/errcheck
	github.com/kisielk/gotool => ./stubs/github.com/kisielk/gotool
	github.com/mailru/easyjson => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/mailru/easyjson
	github.com/modern-go/concurrent => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/modern-go/concurrent
	github.com/modern-go/reflect2 => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/modern-go/reflect2
	github.com/munnerz/goautoneg => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/munnerz/goautoneg
	github.com/pkg/errors => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/pkg/errors
	github.com/spf13/pflag => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/spf13/pflag
	github.com/x448/float16 => ../../target/conformance/client-go-deps/usr/share/gocode/src/github.com/x448/float16
	golang.org/x/net => ../../target/conformance/client-go-deps/usr/share/gocode/src/golang.org/x/net
	golang.org/x/oauth2 => ../../target/conformance/client-go-deps/usr/share/gocode/src/golang.org/x/oauth2
	golang.org/x/sys => ../../target/conformance/client-go-deps/usr/share/gocode/src/golang.org/x/sys
	golang.org/x/telemetry => ./stubs/golang.org/x/telemetry
	golang.org/x/term => ../../target/conformance/client-go-deps/usr/share/gocode/src/golang.org/x/term
	golang.org/x/text => ../../target/conformance/client-go-deps/usr/share/gocode/src/golang.org/x/text
	golang.org/x/time => ../../target/conformance/client-go-deps/usr/share/gocode/src/golang.org/x/time
	google.golang.org/protobuf => ../../target/conformance/client-go-deps/usr/share/gocode/src/google.golang.org/protobuf
	gopkg.in/inf.v0 => ../../target/conformance/client-go-deps/usr/share/gocode/src/gopkg.in/inf.v0
	gopkg.in/yaml.v3 => ../../target/conformance/client-go-deps/usr/share/gocode/src/gopkg.in/yaml.v3
	k8s.io/api => ../../target/conformance/client-go-deps/usr/share/gocode/src/k8s.io/api
	k8s.io/apimachinery => ../../target/conformance/client-go-deps/usr/share/gocode/src/k8s.io/apimachinery
	k8s.io/client-go => ../../target/conformance/client-go-deps/usr/share/gocode/src/k8s.io/client-go
	k8s.io/klog/v2 => ../../target/conformance/client-go-deps/usr/share/gocode/src/k8s.io/klog
	k8s.io/kube-openapi => ../../target/conformance/client-go-deps/usr/share/gocode/src/k8s.io/kube-openapi
	k8s.io/utils => ../../target/conformance/client-go-deps/usr/share/gocode/src/k8s.io/utils
	sigs.k8s.io/json => ../../target/conformance/client-go-deps/usr/share/gocode/src/sigs.k8s.io/json
	sigs.k8s.io/structured-merge-diff/v4 => ../../target/conformance/client-go-deps/usr/share/gocode/src/sigs.k8s.io/structured-merge-diff
	sigs.k8s.io/yaml => ../../target/conformance/client-go-deps/usr/share/gocode/src/sigs.k8s.io/yaml
)
