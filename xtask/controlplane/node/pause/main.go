// Command pause is the sandbox process of every Pod on the test node: it holds the Pod's
// namespaces, reaps the zombies it inherits as PID 1, and exits on SIGINT or SIGTERM. It is
// what registry.k8s.io/pause does, built here so that no image is pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
