"""The compose stack and make demo: static checks of docker-compose.yml and its files."""
