// Command etcd is etcd's server, built from go.etcd.io/etcd/server/v3 as upstream's
// server/main.go does; a module of its own because etcd's pins clash with Kubernetes'.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
