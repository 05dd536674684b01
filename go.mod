module github.com/turnstile/turnstile

go 1.26

require (
	github.com/EventStore/EventStore-Client-Go/v4 v4.2.0
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/google/uuid v1.6.0
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.67.1
	pgregory.net/rapid v1.2.0
)

require (
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	golang.org/x/net v0.30.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
	golang.org/x/text v0.19.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20241007155032-5fefd90f89a9 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)
