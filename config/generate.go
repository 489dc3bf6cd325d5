package config

// dist/brokerd.toml, the service's configuration file, is generated from
// this package (Config's keys, Default(), brokerd.example.toml's comments)
// by TestDistConfig, which fails while the committed file is not current.
//go:generate go test -run ^TestDistConfig -count=1 . -update-dist
