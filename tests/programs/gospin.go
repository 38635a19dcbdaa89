// A Go program with a known CPU split for tests/go.rs: main.hot takes
// three quarters of the time, main.cold one quarter (the same loop, 3:1),
// for ROUNDS rounds; then it prints "done true".
//
//	gospin ROUNDS
package main

import (
	"fmt"
	"os"
	"strconv"
)

var sink int

//go:noinline
func hot(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i ^ sink
	}
	return s
}

//go:noinline
func cold(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i ^ sink
	}
	return s
}

func main() {
	rounds, _ := strconv.Atoi(os.Args[1])
	t := 0
	for r := 0; r < rounds; r++ {
		t += hot(3000000) + cold(1000000)
	}
	fmt.Println("done", t != 0)
}
