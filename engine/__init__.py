"""facestudio engine: everything processors stand on. Never imports processors/ or webui/."""
