package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// storageFile is the configuration-file form of where the platform keeps
// what it stores, DATA/storage.yaml, read by every command that opens the
// data directory (so serve, worker, run and trace agree without repeating
// flags):
//
//	blobs: s3://agentplane-blobs?endpoint=https://s3.example.net&region=eu-west-1&prefix=prod
//
// Credentials never go in it: the S3 key is read from AWS_ACCESS_KEY_ID
// and AWS_SECRET_ACCESS_KEY.
const storageFile = "storage.yaml"

type storageConfig struct {
	Blobs string `yaml:"blobs"`
}

// blobsOf returns where the command's blobs are kept: --blobs (or
// AGENTPLANE_BLOBS), else DATA/storage.yaml's blobs, else "" (the data
// directory's blob folder).
func blobsOf(cm *common) (string, error) {
	if cm.blobs != "" {
		return cm.blobs, nil
	}
	path := filepath.Join(cm.data, storageFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var cfg storageConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%s: %v (want blobs: s3://BUCKET?endpoint=URL...)", path, err)
	}
	return cfg.Blobs, nil
}
