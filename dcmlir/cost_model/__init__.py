"""DietCode's cost model: cost = work / (f_MK * pad * occ), fitted from records.
"""
