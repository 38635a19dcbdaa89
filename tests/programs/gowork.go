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
//	gowork panics N          calls main.guarded(i) for i < N: it calls
//	                         main.risky(i), which panics when i%3 == 0,
//	                         and recovers (returning -1; else 2i+1);
//	                         prints "guarded N panicked P sum S"
//	gowork migrate           main.wait(ch, i) blocks on a channel until
//	                         another goroutine sends, while others spin,
//	                         until 50 calls resumed on another thread than
//	                         they began on (at most 1,000,000 calls); it
//	                         returns 10i, +1 when it moved: prints
//	                         "wait C moved M"
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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

//go:noinline
func risky(i int) int {
	if i%3 == 0 {
		panic("boom")
	}
	return 2 * i
}

//go:noinline
func guarded(i int) (r int) {
	defer func() {
		if recover() != nil {
			r = -1
		}
	}()
	return risky(i) + 1
}

//go:noinline
func wait(ch chan int, i int) int {
	before := syscall.Gettid()
	<-ch
	runtime.Gosched()
	if syscall.Gettid() != before {
		return 10*i + 1
	}
	return 10 * i
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
	case "panics":
		n, panicked, sum := arg(2), 0, 0
		for i := 0; i < n; i++ {
			r := guarded(i)
			if r == -1 {
				panicked++
			}
			sum += r
		}
		fmt.Println("guarded", n, "panicked", panicked, "sum", sum)
	case "migrate":
		var stop int32
		for s := 0; s < 3; s++ {
			go func() {
				for atomic.LoadInt32(&stop) == 0 {
					atomic.AddInt64(&sink, mix(sink))
					runtime.Gosched()
				}
			}()
		}
		ch := make(chan int)
		calls, moved := 0, 0
		for moved < 50 && calls < 1000000 {
			done := make(chan int)
			go func(i int) {
				done <- wait(ch, i)
			}(calls)
			ch <- calls
			if <-done%10 == 1 {
				moved++
			}
			calls++
		}
		atomic.StoreInt32(&stop, 1)
		fmt.Println("wait", calls, "moved", moved)
	}
}
