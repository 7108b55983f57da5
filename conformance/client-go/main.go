// Command kubefan-client-go is client-go pointed at kubefan: a
// SharedInformerFactory on pods and deployments and a dynamic informer on
// one custom resource, as an ordinary controller would run them.
//
// It prints its caches to stdout, one JSON line each time they change (at
// most every 50 ms): the informers' own stores, key -> resourceVersion,
// plus which list mode ran and how many requests of each kind succeeded,
// so that the test driving it (tests/gateway/real_clients.rs) can compare them
// with the simulated API server's state. It exits when its stdin closes
// (its driver is gone) or on SIGTERM/SIGINT.
//
// The list mode is client-go's own: with KUBE_FEATURE_WatchListClient=true
// every reflector opens a streaming watch-list
// (sendInitialEvents=true&resourceVersionMatch=NotOlderThan) instead of a
// LIST; without it, the classic LIST then WATCH.
//
// With -node-agent NODE (repeatable) it also runs, in a SharedInformerFactory
// of its own, a pod informer restricted to spec.nodeName=NODE, as a kubelet
// or a node's log shipper runs one; its store is reported as pods@NODE.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// requestCounts counts successful requests by kind, as the client sent them.
type requestCounts struct {
	lists      atomic.Int64 // GET without watch: a plain LIST
	watches    atomic.Int64 // watch=true without sendInitialEvents
	watchLists atomic.Int64 // watch=true&sendInitialEvents=true
	selected   atomic.Int64 // of all those, the ones with a fieldSelector
}

// countingTransport counts every request that got a 200 answer.
type countingTransport struct {
	next   http.RoundTripper
	counts *requestCounts
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || req.Method != http.MethodGet {
		return resp, err
	}
	q := req.URL.Query()
	if q.Get("fieldSelector") != "" {
		t.counts.selected.Add(1)
	}
	switch {
	case q.Get("watch") == "" || q.Get("watch") == "false" || q.Get("watch") == "0":
		t.counts.lists.Add(1)
	case q.Get("sendInitialEvents") == "true":
		t.counts.watchLists.Add(1)
	default:
		t.counts.watches.Add(1)
	}
	return resp, nil
}

// report is one line of output.
type report struct {
	WatchList  bool                         `json:"watchList"`
	Synced     bool                         `json:"synced"`
	Lists      int64                        `json:"lists"`
	Watches    int64                        `json:"watches"`
	WatchLists int64                        `json:"watchLists"`
	Selected   int64                        `json:"selected"`
	Caches     map[string]map[string]string `json:"caches"`
}

// digest is a store as key -> resourceVersion.
func digest(store cache.Store) map[string]string {
	out := map[string]string{}
	for _, obj := range store.List() {
		m, err := meta.Accessor(obj)
		if err != nil {
			continue
		}
		key := m.GetName()
		if ns := m.GetNamespace(); ns != "" {
			key = ns + "/" + key
		}
		out[key] = m.GetResourceVersion()
	}
	return out
}

// nodeList is the repeatable -node-agent flag.
type nodeList []string

func (n *nodeList) String() string { return strings.Join(*n, ",") }

func (n *nodeList) Set(node string) error {
	if node == "" {
		return fmt.Errorf("-node-agent needs a node name")
	}
	*n = append(*n, node)
	return nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the server to watch (kubefan)")
	crd := flag.String("crd", "example.com/v1/widgets", "the custom resource to watch, as group/version/plural")
	var nodes nodeList
	flag.Var(&nodes, "node-agent", "also run a pod informer of spec.nodeName=`NODE`, in a factory of its own (repeatable)")
	flag.Parse()
	if err := run(*kubeconfig, *crd, nodes); err != nil {
		fmt.Fprintln(os.Stderr, "kubefan-client-go:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, crd string, nodes []string) error {
	parts := strings.Split(crd, "/")
	if len(parts) != 3 {
		return fmt.Errorf("-crd %q is not group/version/plural", crd)
	}
	gvr := schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	counts := &requestCounts{}
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return countingTransport{next: next, counts: counts}
	})
	typed, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}

	var dirty atomic.Bool
	mark := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { dirty.Store(true) },
		UpdateFunc: func(any, any) { dirty.Store(true) },
		DeleteFunc: func(any) { dirty.Store(true) },
	}
	factory := informers.NewSharedInformerFactory(typed, 0)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	stores := map[string]cache.SharedIndexInformer{
		"pods":                         factory.Core().V1().Pods().Informer(),
		"deployments.apps":             factory.Apps().V1().Deployments().Informer(),
		gvr.Resource + "." + gvr.Group: dynFactory.ForResource(gvr).Informer(),
	}
	// A node agent's factory: every list and watch it sends carries
	// fieldSelector=spec.nodeName=NODE.
	var agents []informers.SharedInformerFactory
	for _, node := range nodes {
		selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
		agent := informers.NewSharedInformerFactoryWithOptions(typed, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
		stores["pods@"+node] = agent.Core().V1().Pods().Informer()
		agents = append(agents, agent)
	}
	for _, inf := range stores {
		if _, err := inf.AddEventHandler(mark); err != nil {
			return err
		}
	}

	stop := make(chan struct{})
	var once sync.Once
	closeStop := func() { once.Do(func() { close(stop) }) }
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-signals; closeStop() }()
	go func() {
		// The driver holds stdin open; EOF means it is gone.
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		closeStop()
	}()

	factory.Start(stop)
	dynFactory.Start(stop)
	for _, agent := range agents {
		agent.Start(stop)
	}

	out := bufio.NewWriter(os.Stdout)
	watchList := clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-stop:
			factory.Shutdown()
			dynFactory.Shutdown()
			for _, agent := range agents {
				agent.Shutdown()
			}
			return nil
		case <-tick.C:
		}
		synced := true
		for _, inf := range stores {
			synced = synced && inf.HasSynced()
		}
		// A line when a cache changed, or when the sync state or the
		// request counts did.
		state := fmt.Sprint(synced, counts.lists.Load(), counts.watches.Load(), counts.watchLists.Load(), counts.selected.Load())
		if !dirty.Swap(false) && state == last {
			continue
		}
		last = state
		r := report{
			WatchList:  watchList,
			Synced:     synced,
			Lists:      counts.lists.Load(),
			Watches:    counts.watches.Load(),
			WatchLists: counts.watchLists.Load(),
			Selected:   counts.selected.Load(),
			Caches:     map[string]map[string]string{},
		}
		for name, inf := range stores {
			r.Caches[name] = digest(inf.GetStore())
		}
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		out.Write(line)
		out.WriteByte('\n')
		if err := out.Flush(); err != nil {
			return nil // the driver closed stdout: nothing left to report to
		}
	}
}
