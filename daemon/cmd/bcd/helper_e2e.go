//go:build helpere2e

// `bcd helper call [--socket PATH] OP`, in helpere2e builds only: sends one
// request to bcd helper with the JSON arguments read from standard input
// and prints the response. TestHelperAsRoot runs it as the bcd user from
// the installed slot, so the helper sees the node's own binary calling.
//
// `bcd helper vps-pass --config PATH` (helpere2e builds only): one pass of
// the instances reconciler over the host runtimes of config.toml's
// [instances] (through bcd helper), on the NodeSpec read from standard
// input (protobuf JSON), printing the section's status and the instances'
// and volumes' as JSON: the VPS host path of TestHelperAsRoot.
//
// `bcd helper host-pass --config PATH` (helpere2e builds only): one pass of
// the host reconciler over the host build's machine (withHostUnits: bcd
// helper at config.toml's helper socket) on the signed NodeSpec envelope
// read from standard input (DSSE JSON), printing the section's status as
// JSON: the host units path of TestHelperAsRoot. The pass is told the
// spec is signed, as the converge core says after its own check; the
// helper verifies the envelope again against its command roots.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"bcd/internal/config"
	"bcd/internal/converge"
	"bcd/internal/helper"
	"bcd/internal/hostconfig"
	"bcd/internal/instances"
	"bcd/internal/machine"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func init() {
	helperCall = runHelperCall
	helperVPSPass = runVPSPass
	helperHostPass = runHostPass
}

const helperCallUsage = `usage: bcd helper call [--socket PATH] OP < ARGS.json

Sends OP with the JSON arguments on standard input (none when empty) to
bcd helper and prints its response. Exit 0 when the helper did it, 1 when
it refused (the response names the code), 2 on bad usage.
`

func runHelperCall(args []string, e env) int {
	fs := flag.NewFlagSet("helper call", flag.ContinueOnError)
	socket := fs.String("socket", helper.DefaultSocket, "")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprint(e.stderr, helperCallUsage)
		return 2
	}
	input, err := io.ReadAll(e.stdin)
	if err != nil {
		return fail(e, "helper call", err)
	}
	var argsJSON any
	if s := strings.TrimSpace(string(input)); s != "" {
		argsJSON = json.RawMessage(s)
	}
	var result json.RawMessage
	err = helper.Call(context.Background(), *socket, fs.Arg(0), argsJSON, &result)
	var ref *helper.Refusal
	switch {
	case err == nil:
		out, _ := json.Marshal(helper.Response{OK: true, Result: result})
		fmt.Fprintln(e.stdout, string(out))
		return 0
	case errors.As(err, &ref):
		out, _ := json.Marshal(helper.Response{Code: ref.Code, Error: ref.Message})
		fmt.Fprintln(e.stdout, string(out))
		return 1
	}
	return fail(e, "helper call", err)
}

func runVPSPass(args []string, e env) int {
	fs := flag.NewFlagSet("helper vps-pass", flag.ContinueOnError)
	configPath := fs.String("config", config.DefaultPath, "")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		fmt.Fprint(e.stderr, "usage: bcd helper vps-pass [--config PATH] < SPEC.json\n")
		return 2
	}
	c, err := config.Load(*configPath)
	if err != nil {
		return fail(e, "helper vps-pass", err)
	}
	vps, err := hostVPS(c, c.DataDir, logger(e))
	if err != nil || vps == nil {
		return fail(e, "helper vps-pass", fmt.Errorf("no [instances] in %s: %v", *configPath, err))
	}
	input, err := io.ReadAll(e.stdin)
	if err != nil {
		return fail(e, "helper vps-pass", err)
	}
	spec := &agentv1.NodeSpec{}
	if err := protojson.Unmarshal(input, spec); err != nil {
		return fail(e, "helper vps-pass", err)
	}
	r, err := instances.New(instances.Config{Runtimes: vps.Runtimes, Volumes: vps.Volumes, Images: vps.Images,
		Accelerator: vps.Accelerator, Capacity: instances.CapacityOf(machine.NewHost()), Log: logger(e)})
	if err != nil {
		return fail(e, "helper vps-pass", err)
	}
	res, err := r.Reconcile(context.Background(), converge.Input{Spec: spec})
	if err != nil {
		return fail(e, "helper vps-pass", err)
	}
	rep := &agentv1.StatusReport{}
	if err := r.Report(rep); err != nil {
		return fail(e, "helper vps-pass", err)
	}
	statuses, _ := protojson.Marshal(&agentv1.StatusReport{Instances: rep.GetInstances(), Volumes: rep.GetVolumes()})
	out, _ := json.Marshal(map[string]any{"state": res.State.String(), "reason": res.Reason, "message": res.Message,
		"report": json.RawMessage(statuses)})
	fmt.Fprintln(e.stdout, string(out))
	return 0
}

func runHostPass(args []string, e env) int {
	fs := flag.NewFlagSet("helper host-pass", flag.ContinueOnError)
	configPath := fs.String("config", config.DefaultPath, "")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		fmt.Fprint(e.stderr, "usage: bcd helper host-pass [--config PATH] < ENVELOPE.json\n")
		return 2
	}
	c, err := config.Load(*configPath)
	if err != nil {
		return fail(e, "helper host-pass", err)
	}
	m, err := withHostUnits(machine.NewHost(), c, logger(e))
	if err != nil {
		return fail(e, "helper host-pass", err)
	}
	system, ok := m.(hostconfig.System)
	if !ok {
		return fail(e, "helper host-pass", fmt.Errorf("no helper_socket in %s", *configPath))
	}
	input, err := io.ReadAll(e.stdin)
	if err != nil {
		return fail(e, "helper host-pass", err)
	}
	env, err := pki.ParseEnvelopeJSON(input)
	if err != nil {
		return fail(e, "helper host-pass", err)
	}
	spec := &agentv1.NodeSpec{}
	if err := proto.Unmarshal(env.Payload, spec); err != nil {
		return fail(e, "helper host-pass", err)
	}
	res, err := hostconfig.New(system).Reconcile(context.Background(), converge.Input{Spec: spec, Envelope: env.Proto(), Signed: true})
	if err != nil {
		return fail(e, "helper host-pass", err)
	}
	out, _ := json.Marshal(map[string]any{"state": res.State.String(), "reason": res.Reason, "message": res.Message})
	fmt.Fprintln(e.stdout, string(out))
	return 0
}
