# Build and run turnstile. (No docker engine runs on the development machines;
# this file is kept valid by hand.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -o /out/turnstile ./cmd/turnstile

FROM debian:bookworm-slim
COPY --from=build /out/turnstile /usr/local/bin/turnstile
VOLUME /data
ENTRYPOINT ["turnstile"]
CMD ["serve", "--data", "/data"]
