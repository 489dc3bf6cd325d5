package ctl

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
)

// definitionsPath is the API resource of the whole broker's definitions,
// or of one vhost's when -p was given.
func (r *run) definitionsPath() string {
	if r.opts.vhostSet {
		return apiPath("definitions", r.vhost())
	}
	return apiPath("definitions")
}

// exportDefinitions: export_definitions FILE|-. The API's JSON is written
// unchanged; the file is created 0600, since it holds password hashes.
func exportDefinitions(r *run, args []string) error {
	file := args[0]
	if file != "-" {
		dir := filepath.Dir(file)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return failf(ExitDataErr, "Directory %s does not exist", dir)
		}
		r.out.info("Exporting definitions in JSON to a file at \"%s\" ...", file)
	}
	data, err := r.c.do(r.ctx, request{method: http.MethodGet, path: r.definitionsPath()})
	if err != nil {
		if r.opts.vhostSet {
			return r.explain(err, r.vhost(), "", err)
		}
		return err
	}
	if file == "-" {
		_, err := r.env.Stdout.Write(data)
		if err != nil {
			return failf(ExitSoftware, "write definitions to standard output: %v", err)
		}
		return nil
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return failf(ExitDataErr, "write definitions to %s: %v", file, err)
	}
	return nil
}

// importDefinitions: import_definitions [FILE|-]. The file must be JSON
// (checked here, as rabbitmqctl does, before anything is sent); what it
// defines is the server's to accept (its reason is printed).
func importDefinitions(r *run, args []string) error {
	file := "-"
	if len(args) > 0 {
		file = args[0]
	}
	var data []byte
	var err error
	if file == "-" {
		r.out.info("Importing definitions in JSON from standard input ...")
		data, err = io.ReadAll(r.env.Stdin)
		if err != nil {
			return failf(ExitDataErr, "read standard input: %v", err)
		}
	} else {
		data, err = os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			return failf(ExitDataErr, "File %s does not exist", file)
		}
		if err != nil {
			return failf(ExitDataErr, "read %s: %v", file, err)
		}
		r.out.info("Importing definitions in JSON from a file at \"%s\" ...", file)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return failf(ExitDataErr, "Failed to deserialise input (format: JSON) (error: %v)", err)
	}
	_, err = r.c.do(r.ctx, request{method: http.MethodPost, path: r.definitionsPath(), body: data})
	if err != nil && r.opts.vhostSet {
		return r.explain(err, r.vhost(), "", err)
	}
	return err
}
