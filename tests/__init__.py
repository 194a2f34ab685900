"""The harness's own tests (a package, so that `tests.*` never resolves to a site-packages
`tests` folder some dependency ships, e.g. smdebug-rulesconfig under the sagemaker SDK)."""
