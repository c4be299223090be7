
	fakehw-41L40S PCIe server (fakehw)FKH51D4D88E87D0"AMD EPYC 9354 32-Core Processor(@0€€€€€8B6.8.0-fakehwJUbuntu 24.04 LTS (fakehw)