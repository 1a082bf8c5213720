"""What a solve returns: the xarray Dataset, energy balance, and plots."""
