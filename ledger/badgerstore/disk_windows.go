package badgerstore

import "golang.org/x/sys/windows"

// diskSpace reports the bytes the caller may still use on the volume
// holding dir (GetDiskFreeSpaceEx, which counts quotas), and whether the
// volume is read-only (GetVolumeInformation's FILE_READ_ONLY_VOLUME).
func diskSpace(dir string) (free int64, readOnly bool, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, false, err
	}
	var avail, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &total, &totalFree); err != nil {
		return 0, false, err
	}
	root := make([]uint16, windows.MAX_PATH+1)
	if err := windows.GetVolumePathName(p, &root[0], uint32(len(root))); err != nil {
		return 0, false, err
	}
	var flags uint32
	if err := windows.GetVolumeInformation(&root[0], nil, 0, nil, nil, &flags, nil, 0); err != nil {
		return 0, false, err
	}
	return int64(avail), flags&windows.FILE_READ_ONLY_VOLUME != 0, nil
}
