// Command etcd is the upstream etcd server entry point, built at the version
// pinned in go.mod (the one k8s.io/kubernetes itself requires).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
