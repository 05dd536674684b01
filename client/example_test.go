package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/turnstile/turnstile/client"
	"github.com/turnstile/turnstile/client/wire"
)

// Define an action, request an execution of it and wait for its end.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(serverURL, client.WithToken(adminToken)) // e.g. "http://127.0.0.1:8080"
	if err != nil {
		log.Fatal(err)
	}
	_, _, err = c.DefineAction(ctx, wire.Policy{Ref: "example.echo", Runner: "core.echo", MaxConcurrent: 2})
	if err != nil {
		log.Fatal(err)
	}
	req, err := c.RequestExecution(ctx, wire.ExecutionRequest{
		Action: "example.echo",
		Input:  json.RawMessage(`{"greeting":"hello"}`),
	}, client.WithIdempotencyKey("example-1"))
	if err != nil {
		log.Fatal(err)
	}
	x, err := c.Wait(ctx, req.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(x.Status, string(x.Result))
	// Output: completed {"greeting":"hello"}
}

// A refusal is a *client.Problem: tell refusals apart by status or type.
func ExampleProblem() {
	ctx := context.Background()
	c, _ := client.New(serverURL, client.WithToken(adminToken))
	_, err := c.Execution(ctx, "no-such-execution")
	var p *client.Problem
	if errors.As(err, &p) {
		fmt.Println(p.Status, p.Type == client.ProblemNotFound, client.IsNotFound(err))
		fmt.Println(p.Detail)
	}
	// Output:
	// 404 true true
	// no execution "no-such-execution"
}

// Watch one action's executions change state; the feed resumes by itself
// after a dropped connection.
func ExampleClient_FollowExecutions() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := client.New(serverURL, client.WithToken(adminToken))
	if _, _, err := c.DefineAction(ctx, wire.Policy{Ref: "example.follow", Runner: "core.noop"}); err != nil {
		log.Fatal(err)
	}
	req, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "example.follow"})
	if err != nil {
		log.Fatal(err)
	}
	// From position 0: every execution of the action, each in its latest state.
	err = c.FollowExecutions(ctx, client.FeedOptions{Action: "example.follow", Start: client.FromPosition(0)},
		func(x wire.Execution) error {
			if x.ID == req.ID && client.Terminal(x.Status) {
				fmt.Println("ended:", x.Status)
				return client.ErrStop
			}
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	// Output: ended: completed
}

// Read the whole log, page by page, as an auditor would.
func ExampleClient_AllEvents() {
	ctx := context.Background()
	c, _ := client.New(serverURL, client.WithToken(readerToken))
	n := 0
	for e, err := range c.AllEvents(ctx, 0) {
		if err != nil {
			log.Fatal(err)
		}
		if e.Position != uint64(n) {
			log.Fatalf("event %d at position %d", n, e.Position)
		}
		n++
	}
	fmt.Println(n > 0)
	// Output: true
}

// Page through an action's executions, newest first.
func ExampleClient_AllExecutions() {
	ctx := context.Background()
	c, _ := client.New(serverURL, client.WithToken(adminToken))
	if _, _, err := c.DefineAction(ctx, wire.Policy{Ref: "example.list", Runner: "core.noop"}); err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := c.RequestExecution(ctx, wire.ExecutionRequest{Action: "example.list"}); err != nil {
			log.Fatal(err)
		}
	}
	n := 0
	for _, err := range c.AllExecutions(ctx, client.ListOptions{Action: "example.list", Limit: 2}) {
		if err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Println(n, "executions")
	// Output: 3 executions
}
