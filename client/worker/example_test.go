package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/turnstile/turnstile/client/worker"
)

// A worker that serves the runner "greet": every execution of an action
// whose runner is "greet" runs this function, under the action's FIFO queue
// and concurrency limit.
func Example() {
	srv, err := startServer(15 * time.Second) // a real turnstile server over HTTP, for the example
	if err != nil {
		panic(err)
	}
	defer srv.stop()

	w := worker.New(worker.Config{Server: srv.URL, Name: "greeter-1", Slots: 4})
	w.Handle("greet", func(ctx context.Context, job worker.Job) (any, error) {
		var in struct{ Name string }
		if err := json.Unmarshal(job.Input, &in); err != nil {
			return nil, err
		}
		return map[string]string{"greeting": "hello, " + strings.ToUpper(in.Name)}, nil
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }() // in a program: ctx from signal.NotifyContext

	_, _ = do("POST", srv.URL+"/api/v1/actions", `{"ref":"demo.greet","runner":"greet","max_concurrent":2}`, nil)
	id, _ := srv.request("demo.greet", `{"name":"ada"}`)
	x, err := srv.waitEnd(id, 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println(x.Status, x.Worker, string(x.Result))

	stop() // drains: nothing new, runs in flight finish, then Run returns
	fmt.Println(<-done)
	// Output:
	// completed greeter-1 {"greeting":"hello, ADA"}
	// <nil>
}
