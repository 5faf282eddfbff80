"""The ops, one per module, each in four layers: kernel, launcher, autograd function, public function."""
