// Go programs for tests/go.rs's probes on Go functions (Go's register
// ABI; goroutine stacks that grow, move and migrate between threads).
//
//	gowork stacks G DEPTH    G goroutines each recurse DEPTH deep through
//	                         main.rec(n, s) with a 256-byte local (their
//	                         stacks grow and are copied many times);
//	                         prints "rec G*(DEPTH+1)"
//	gowork preempt N         4 goroutines spin, calling main.step N times
//	                         each, while another runs the collector and
//	                         runtime/pprof writes a CPU profile to
//	                         $GOWORK_PPROF; prints "step 4*N gc true"
//	gowork leaf              calls main.leaf once (a leaf too small for
//	                         Go to check its stack): "leaf 1"
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
)

var sink int64

//go:noinline
func rec(n int, s string) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return len(s) + int(pad[0])
	}
	return rec(n-1, s) + int(pad[n%256]&1)
}

//go:noinline
func mix(a int64) int64 {
	return a ^ (a >> 3)
}

//go:noinline
func step(i int, a, b int64) int64 {
	return mix(a*int64(i)) + b
}

//go:noinline
func leaf(a int) int {
	return a + 1
}

func main() {
	arg := func(i int) int {
		n, err := strconv.Atoi(os.Args[i])
		if err != nil {
			panic(err)
		}
		return n
	}
	switch os.Args[1] {
	case "stacks":
		g, depth := arg(2), arg(3)
		var wg sync.WaitGroup
		for i := 0; i < g; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				atomic.AddInt64(&sink, int64(rec(depth, "hello")))
			}()
		}
		wg.Wait()
		fmt.Println("rec", g*(depth+1))
	case "preempt":
		n := arg(2)
		if path := os.Getenv("GOWORK_PPROF"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				panic(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				panic(err)
			}
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
		var wg sync.WaitGroup
		var stop int32
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		go func() {
			for atomic.LoadInt32(&stop) == 0 {
				runtime.GC()
			}
		}()
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				var t int64
				for i := 0; i < n; i++ {
					t = step(i, t, int64(g))
				}
				atomic.AddInt64(&sink, t)
			}(g)
		}
		// One collection at least while they run (a single CPU may run
		// them to the end before the loop above gets a turn).
		runtime.GC()
		wg.Wait()
		atomic.StoreInt32(&stop, 1)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		fmt.Println("step", 4*n, "gc", after.NumGC > before.NumGC)
	case "leaf":
		fmt.Println("leaf", leaf(0))
	}
}
